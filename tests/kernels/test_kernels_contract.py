"""kernels/contract.py and kernels/sizes.py: the codes the contract hands out are the ones the
CPU kernels branch on, and neither module needs Numba (a planning device imports them alone)."""

import pathlib
import subprocess
import sys

import pytest

from nnmem.kernels import contract
from nnmem.kernels.cpu import strided, unary

KERNELS = pathlib.Path(contract.__file__).resolve().parent


@pytest.mark.parametrize(
    "table, module", [(contract.UNARY_CODES, unary), (contract.BINARY_CODES, strided)]
)
def test_each_code_is_the_one_its_kernel_branches_on(table, module):
    assert list(table.values()) == list(range(len(table)))
    for name, code in table.items():
        assert getattr(module, name.upper()) == code, name


@pytest.mark.parametrize("name", ["contract.py", "sizes.py"])
def test_host_modules_import_no_numba(name):
    """Loaded from its file in a bare interpreter, outside any package: nothing else comes in."""
    code = f"""
import importlib.util, sys
spec = importlib.util.spec_from_file_location("host", {str(KERNELS / name)!r})
spec.loader.exec_module(importlib.util.module_from_spec(spec))
print(sorted(m for m in sys.modules if m.split(".")[0] in ("numba", "numpy", "nnmem")))
"""
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
