"""nnmem: a Numba deep-learning framework whose subject is memory.

SINGA's user API: ``from nnmem import tensor, device, layer, model, opt, autograd``.
"""


def _kernels_beside_the_package():
    """Load the clone's kernels/ folder as nnmem.kernels where no installed nnmem provides it.

    The kernel layer lives in the top-level folder kernels/ and is installed as nnmem.kernels
    (pyproject.toml's package-dir). A Python started in a clone's root imports the clone's
    nnmem/ folder (the current directory comes first on sys.path), whatever install came
    before; an editable install maps nnmem.kernels to kernels/ for it, but after
    ``pip install .`` nothing does, and ``import nnmem`` failed with "No module named
    'nnmem.kernels'". So when no finder knows nnmem.kernels, the folder beside this package is
    loaded under that name: exactly that folder, never the clone's root (whose tests/, bench/
    ... must not become modules of nnmem)."""
    import importlib.util  # here, not at the top: nnmem's namespace is SINGA's modules
    import os
    import sys

    if importlib.util.find_spec(f"{__name__}.kernels") is not None:
        return  # installed (site-packages/nnmem/kernels), or mapped by an editable install
    folder = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "kernels")
    init = os.path.join(folder, "__init__.py")
    if not os.path.isfile(init):
        return  # no clone around us: the import below fails and says what is missing
    spec = importlib.util.spec_from_file_location(
        f"{__name__}.kernels", init, submodule_search_locations=[folder]
    )
    kernels = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = kernels
    spec.loader.exec_module(kernels)
    globals()["kernels"] = kernels  # as the import system binds a loaded subpackage


_kernels_beside_the_package()
del _kernels_beside_the_package

from nnmem import autograd, device, layer, model, ops, opt, tensor  # noqa: E402, F401
from nnmem.version import __version__  # noqa: E402, F401

# nnmem.tensor sits below the operators: they give Tensor its arithmetic once all is imported.
ops.attach_to_tensor()
