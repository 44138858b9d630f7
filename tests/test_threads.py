"""Threads: nnmem changes no process-wide setting, and runs its kernels on Numba's TBB layer
(kernels/cpu/threads.py says why)."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from nnmem.kernels.cpu import threads

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_python(code, **env):
    """Run `code` in a fresh interpreter; its last stdout line, parsed as JSON."""
    full_env = dict(os.environ, **env)
    for name, value in env.items():
        if value is None:
            full_env.pop(name)
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=REPO,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


TRAIN_A_STEP = """
    import json, os
    import numpy as np
    before = dict(os.environ)
    from nnmem import device, opt, tensor
    from nnmem.kernels.cpu import blas
    from nnmem.models import create_model
    blas_before = blas.FOUND.get_threads() if blas.FOUND else None
    dev = device.create_cpu_device("256MiB")
    model = create_model("cnn", num_channels=1)
    model.set_optimizer(opt.SGD(lr=0.01))
    tx = tensor.PlaceHolder((8, 1, 28, 28), dev)
    ty = tensor.PlaceHolder((8,), dev, tensor.int32)
    model.compile([tx], is_train=True, use_graph=True)
    tx.copy_from_numpy(np.random.default_rng(0).random(tx.shape, dtype=np.float32))
    ty.copy_from_numpy(np.arange(8, dtype=np.int32))
    for _ in range(2):
        model(tx, ty)
    import numba
    print(json.dumps({
        "changed": sorted(k for k in set(before) | set(os.environ)
                          if before.get(k) != os.environ.get(k)),
        "blas": [blas_before, blas.FOUND.get_threads() if blas.FOUND else None],
        "layer": numba.threading_layer(),
        "numba_threads": [numba.get_num_threads(), numba.config.NUMBA_NUM_THREADS],
    }))
"""


def test_training_changes_no_environment_variable_and_no_thread_count():
    """Importing nnmem and training sets no environment variable (OMP_WAIT_POLICY would slow
    every OpenMP library of the program), leaves OpenBLAS's thread count and the caller's
    Numba thread count as they were."""
    out = run_python(TRAIN_A_STEP)
    assert out["changed"] == []
    assert out["blas"][0] == out["blas"][1]
    assert out["numba_threads"][0] == out["numba_threads"][1]


@pytest.mark.skipif(threads.tbb_library() is None, reason="the tbb wheel is not installed")
def test_the_kernels_run_on_tbb_when_the_wheel_is_installed():
    assert run_python(TRAIN_A_STEP)["layer"] == "tbb"


def test_a_layer_the_user_chose_is_kept():
    """NUMBA_THREADING_LAYER is the user's choice: nnmem loads no TBB then."""
    out = run_python(TRAIN_A_STEP, NUMBA_THREADING_LAYER="workqueue")
    assert out["layer"] == "workqueue"


def test_co_running_is_refused_on_workqueue_with_the_reason():
    out = run_python(
        """
        import json
        from nnmem import device, tensor
        from nnmem.models import create_model
        dev = device.create_cpu_device("64MiB")
        model = create_model("mlp", hidden=(8,))
        tx = tensor.PlaceHolder((4, 1, 28, 28), dev)
        try:
            model.compile([tx], is_train=True, use_graph=True, concurrency="1-3")
            print(json.dumps("accepted"))
        except ValueError as e:
            print(json.dumps(str(e)))
        """,
        NUMBA_THREADING_LAYER="workqueue",
    )
    assert "'workqueue' threading layer" in out and "pip install tbb" in out
