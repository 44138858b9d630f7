"""Every CUDA kernel compiles to PTX, for every signature it is launched with, without a GPU.

The CUDA simulator runs kernels as Python and checks no types, so a kernel can pass every
simulated test and still fail to compile for a real GPU (an untyped expression, a shared array
whose shape is not a constant, a float64 sneaking into a float32 sum). numba.cuda.compile_ptx
runs Numba's whole CUDA pipeline and NVIDIA's NVVM, which ships in the numba-cuda[cu13] wheels,
for a compute capability we name: sm_80 (A100) and sm_90 (H100). The signatures come from the
registry in kernels/cuda/_launch.py, and test_registry_covers_every_kernel makes sure no kernel
is left out of it.
"""

import ast
import importlib
import inspect
import os
import pathlib
import re
import types

import pytest

if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
    pytest.skip("the CUDA simulator has no compile_ptx", allow_module_level=True)
# numba-cuda (the NVIDIA-maintained CUDA target, with NVVM in its [cu13] wheels): Numba's own
# numba.cuda, which it replaces, is deprecated and mistypes some builtins (max, min) for CUDA.
pytest.importorskip(
    "numba_cuda", reason="compiling to PTX needs numba-cuda: pip install 'numba-cuda[cu13]'"
)
cuda = pytest.importorskip("numba.cuda")

from nnmem.kernels import cuda as cuda_kernels  # noqa: E402
from nnmem.kernels.cuda import _launch  # noqa: E402

KERNELS_DIR = pathlib.Path(cuda_kernels.__file__).parent
CCS = [(8, 0), (9, 0)]
CASES = [(k.name, sig) for k in _launch.KERNELS.values() for sig in k.signatures]


def _nvvm_works():
    try:
        cuda.compile_ptx(lambda a: None, "void(float32[::1])", cc=CCS[0])
    except Exception as e:  # no NVVM / toolkit: numba-cuda without its [cu13] extra
        return f"numba.cuda cannot compile PTX here ({type(e).__name__}: {e})".splitlines()[0]
    return None


_NO_NVVM = _nvvm_works()


@pytest.fixture
def compile_without_gpu(monkeypatch):
    """Compile kernels that call device functions, with no GPU in the machine.

    compile_ptx itself never touches a GPU, but a kernel's call to a ``cuda.jit(device=True)``
    function makes Numba compile that function for "the current device" (numba-cuda's
    CUDADispatcher.compile_device asks the driver for its compute capability), which fails
    without a driver. We answer the question for it. The device function's LLVM IR is linked
    into each kernel, and NVVM turns the whole into PTX for the cc passed to compile_ptx."""
    if _NO_NVVM:
        pytest.skip(_NO_NVVM)
    if cuda.is_available():  # a real GPU answers for itself
        return
    from numba.cuda import dispatcher

    fake = types.SimpleNamespace(compute_capability=CCS[0])
    monkeypatch.setattr(dispatcher, "get_current_device", lambda: fake)


def _entry_names(ptx):
    return re.findall(r"\.entry\s+(\w+)", ptx)


@pytest.mark.parametrize("cc", CCS, ids=lambda cc: f"sm_{cc[0]}{cc[1]}")
@pytest.mark.parametrize(("name", "signature"), CASES, ids=[f"{n}:{s}" for n, s in CASES])
def test_kernel_compiles_to_ptx(compile_without_gpu, name, signature, cc):
    kernel = _launch.KERNELS[name]
    ptx, restype = cuda.compile_ptx(kernel.py_func, signature, cc=cc)
    assert str(restype) == "none"
    assert f".target sm_{cc[0]}{cc[1]}" in ptx
    # One kernel entry, named after the Python function (Numba mangles "name" as "<len>name").
    py_name = kernel.py_func.__name__
    entries = _entry_names(ptx)
    assert len(entries) == 1 and f"{len(py_name)}{py_name}" in entries[0], entries
    source = inspect.getsource(kernel.py_func)
    if "cuda.shared.array" in source:  # tiles / tree reductions: shared memory and barriers
        assert ".shared" in ptx and "bar.sync" in ptx
    if "cuda.atomic.add" in source:  # an atomic add to global memory (atom or red; float or int)
        assert re.search(r"\b(atom|red)\.global\.add\.(f32|f64|u32|s32)", ptx)
    if name.endswith("._gemm_kernel") and "float64" not in signature:
        # float32 (and float16) GEMM accumulates in float32: no float64 instruction (a silent
        # 2-64x slowdown)
        assert "fma.rn.f32" in ptx and ".f64" not in ptx
    if "float16" in signature:
        # float16 is storage only: values are widened as they are loaded, so no half-precision
        # operator or function of cuda_fp16 (extern functions on __half) is ever called
        assert "__half" not in ptx


def _jit_decorated(tree):
    """The uses of an attribute named ``jit`` (``cuda.jit``, ``numba.cuda.jit``) in a module."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "jit":
            found.append(ast.unparse(node))
    return found


def test_registry_covers_every_kernel():
    """Every dispatcher in kernels/cuda is a registered kernel or device function, and only
    _launch.py calls cuda.jit (a kernel made any other way would escape the PTX test)."""
    registered = {id(k.dispatcher) for k in _launch.KERNELS.values()}
    registered |= {id(d) for d in _launch.DEVICE_FUNCTIONS.values()}
    dispatcher_types = tuple(
        {type(k.dispatcher) for k in _launch.KERNELS.values()}
        | {type(d) for d in _launch.DEVICE_FUNCTIONS.values()}
    )
    stray = []
    for path in sorted(KERNELS_DIR.glob("*.py")):
        name = "" if path.stem == "__init__" else f".{path.stem}"
        module = importlib.import_module(f"nnmem.kernels.cuda{name}")
        for attr, value in vars(module).items():
            if isinstance(value, dispatcher_types) and id(value) not in registered:
                stray.append(f"{path.name}: {attr}")
        if path.name != "_launch.py":
            for use in _jit_decorated(ast.parse(path.read_text())):
                stray.append(f"{path.name}: uses {use}; make kernels with _launch.kernel")
    assert not stray, stray


def test_every_float32_signature_has_its_float64_twin():
    """The CPU kernels take both; so must the registry (and so the PTX test covers both)."""
    for kernel in _launch.KERNELS.values():
        sigs = set(kernel.signatures)
        f32 = [s for s in sigs if "float32[" in s]
        assert f32 or kernel.name.endswith("._increment_kernel"), f"{kernel.name}: no float32"
        assert {s.replace("float32", "float64") for s in f32} <= sigs, kernel.name
