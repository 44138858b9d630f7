"""A pytest plugin that blanks out one function of nnmem, as a learner starting an exercise would,
to show that the exercise's tests fail without it:

    PYTHONPATH=tests/exercises python -m pytest -p exercise_stub \\
        --stub nnmem.memory.pool:first_fit -m exercise_pool tests/exercises/test_first_fit.py

``--stub MODULE:NAME`` replaces the function, method (``Class.method``) or CUDA kernel NAME of
MODULE with one that raises NotImplementedError, before any test module is imported (so a
test's ``from MODULE import NAME`` gets the stub too). tests/test_exercises.py runs every
exercise this way. Learners do not need it: they edit the function itself (exercises/README.md).
"""

import importlib


def pytest_addoption(parser):
    parser.addoption(
        "--stub",
        metavar="MODULE:NAME",
        help="replace NAME in MODULE by a stub that raises NotImplementedError",
    )


def pytest_configure(config):
    target = config.getoption("stub")
    if target:
        stub_out(target)


def stub_out(target):
    """Replace `target` ("package.module:Class.method") by a stub; return the original."""
    module_name, _, name = target.partition(":")
    owner = importlib.import_module(module_name)
    *path, attribute = name.split(".")
    for part in path:
        owner = getattr(owner, part)
    original = getattr(owner, attribute)  # a misspelt target fails here, loudly

    def stub(*args, **kwargs):
        raise NotImplementedError(f"{target}: stubbed out (exercise_stub)")

    if hasattr(original, "py_func"):  # a numba.cuda kernel: the stub is launched like one
        from numba import cuda

        stub = cuda.jit(stub)
    setattr(owner, attribute, stub)
    return original
