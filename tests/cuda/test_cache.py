"""The CUDA kernels' disk cache (kernels/cuda/_cache.py): a second process loads what the first
compiled, from NUMBA_CACHE_DIR, and nothing is written beside the package's source."""

import os
import pathlib
import subprocess
import sys

import pytest

KERNELS = pathlib.Path(__file__).resolve().parents[2] / "kernels" / "cuda"

# Launch one kernel; print (cache hits, cache misses) of its dispatcher.
SCRIPT = """
import numpy as np
from numba import cuda
from nnmem.kernels import cuda as k
from nnmem.kernels.cuda import elementwise
x = cuda.to_device(np.arange(8, dtype=np.float32) - 4)
y = cuda.device_array(8, np.float32)
k.relu_forward(y, x)
cuda.synchronize()
d = elementwise._relu_forward_kernel
print(sum(d._cache_hits.values()), sum(d._cache_misses.values()))
"""


def test_a_second_process_loads_the_kernels_from_the_cache_folder(tmp_path):
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        pytest.skip("the simulator compiles nothing: there is no cache to test")
    cuda = pytest.importorskip("numba.cuda", reason="numba-cuda is not installed")
    if not cuda.is_available():
        pytest.skip("needs a CUDA GPU: a cache entry is code for one GPU architecture")
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    before = set(KERNELS.rglob("*.nbi"))

    def run():
        out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                             text=True, check=True)  # fmt: skip
        return tuple(map(int, out.stdout.split()[-2:]))

    assert run() == (0, 1)  # compiled, and saved
    assert list(tmp_path.rglob("*.nbi")), "no cache index in NUMBA_CACHE_DIR"
    assert run() == (1, 0)  # loaded, not compiled
    assert set(KERNELS.rglob("*.nbi")) == before, "a cache file was written beside the source"
