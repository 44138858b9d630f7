"""Where Numba's cache of the kernels goes (issue 7: README commands A then B broke `nnmem`).

Numba's default for ``njit(cache=True)`` writes the compiled kernels into ``__pycache__`` beside
the source: inside ``site-packages/nnmem`` for an installed nnmem, where pip leaves the files
behind on uninstall and the leftover folder hides a later editable install. nnmem's kernels
keep Numba's cache in Numba's user-wide folder (or ``NUMBA_CACHE_DIR``) instead, and apart for
``NUMBA_BOUNDSCHECK=1``, without changing any Numba setting of the process (see
``kernels/cpu/_jit.py``). The end-to-end check (both README commands, both orders, one clone)
is in ``.ci/run``: it needs fresh virtual environments and takes a minute.

And where nnmem.kernels comes from: a ``pip install .`` lays the folder kernels/ out as
nnmem/kernels (never as a top-level ``kernels``), and a Python started in the clone's root,
which imports the clone's nnmem/ whatever was installed, finds the clone's kernels/ beside it.
"""

import os
import shutil
import subprocess
import sys
import textwrap

import numba
import pytest
from numba.core.dispatcher import Dispatcher

import nnmem.kernels.cpu as K
from nnmem.kernels.cpu import _window, threads

# every module of kernels (K.MODULES), their shared helpers, and the threading layer's probe
KERNEL_MODULES = [*K.MODULES, _window, threads]
PACKAGE_DIR = os.path.dirname(os.path.abspath(K.__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

needs_jit = pytest.mark.skipif(numba.config.DISABLE_JIT, reason="NUMBA_DISABLE_JIT: no compiling")


def _dispatchers():
    for module in KERNEL_MODULES:
        for name, value in vars(module).items():
            if isinstance(value, Dispatcher):
                yield f"{module.__name__}.{name}", value
            elif hasattr(value, "pick"):  # _jit.by_size: two compilations of one source
                yield f"{module.__name__}.{name}.serial", value.serial
                yield f"{module.__name__}.{name}.parallel", value.parallel


@needs_jit
def test_every_kernel_caches_outside_the_package():
    found = dict(_dispatchers())
    assert len(found) >= 40, sorted(found)  # all of them, not a lucky few
    for name, dispatcher in found.items():
        path = dispatcher.stats.cache_path
        assert isinstance(path, str) and os.path.isabs(path), f"{name} is not cached: {path!r}"
        inside = os.path.commonpath([os.path.abspath(path), PACKAGE_DIR]) == PACKAGE_DIR
        assert not inside, f"{name} caches inside the package: {path}"


def _run(code, tmp_path, path=None, flags=(), **env_changes):
    """Run `code` in a fresh interpreter (Numba reads its settings once, at import) started in
    tmp_path, with `path` on its PYTHONPATH (default: tmp_path, then this one's sys.path)."""
    env = dict(os.environ)
    for key in (
        "NUMBA_CACHE_DIR",
        "NUMBA_BOUNDSCHECK",
        "NUMBA_DISABLE_JIT",
        "NUMBA_CACHE_LOCATOR_CLASSES",
    ):
        env.pop(key, None)
    env.update(env_changes)
    if path is None:
        path = [tmp_path] + [p for p in sys.path if p]
    env["PYTHONPATH"] = os.pathsep.join(map(str, path))
    result = subprocess.run(
        [sys.executable, *flags, "-c", textwrap.dedent(code)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.strip().splitlines()


@needs_jit
def test_numba_cache_dir_is_used_and_the_second_process_loads_instead_of_compiling(tmp_path):
    cache = tmp_path / "cache"
    code = """
        import numpy as np
        import nnmem.kernels.cpu as K
        x = np.arange(-3.0, 3.0)
        y = np.empty_like(x)
        K.relu_forward(y, x)
        assert y.tolist() == [0, 0, 0, 0, 1, 2]
        stats = K.relu_forward.serial.stats  # a small array: the serial compilation
        print(stats.cache_path)
        print(sum(stats.cache_hits.values()), sum(stats.cache_misses.values()))
    """
    path, first = _run(code, tmp_path, NUMBA_CACHE_DIR=str(cache))
    assert path.startswith(str(cache)), path
    assert first == "0 1"  # compiled, then saved
    assert any(name.endswith(".nbi") for name in os.listdir(path))
    path_again, second = _run(code, tmp_path, NUMBA_CACHE_DIR=str(cache))
    assert path_again == path
    assert second == "1 0"  # loaded from the cache, not compiled


@needs_jit
def test_a_kernel_compiled_serial_and_parallel_caches_each_apart(tmp_path):
    """_jit.by_size compiles one source twice. Numba keys its cache by name and signature, not
    by parallel=True: under one name, the compilation that came second loaded the first's code
    (a parallel kernel running serial, or a serial one waking every thread). Each must compile
    its own code in a fresh cache, and load its own in the next process."""
    code = """
        import numpy as np
        from nnmem.kernels.cpu import _jit, elementwise as E
        small, large = np.ones(8, np.float32), np.ones(_jit.PARALLEL_FROM, np.float32)
        E.relu_forward(small, small)  # the serial one first: the order that hid the bug
        E.relu_forward(large, large)
        for d in (E.relu_forward.serial, E.relu_forward.parallel):
            print(d._cache._cache_file._index_name,
                  sum(d.stats.cache_hits.values()), sum(d.stats.cache_misses.values()))
    """
    cache = str(tmp_path / "cache")
    first = _run(code, tmp_path, NUMBA_CACHE_DIR=cache)
    (serial_index, *serial_first), (parallel_index, *parallel_first) = (
        line.split() for line in first
    )
    assert serial_index != parallel_index  # two cache files
    assert serial_first == parallel_first == ["0", "1"]  # each compiled its own
    again = _run(code, tmp_path, NUMBA_CACHE_DIR=cache)
    assert [line.split()[1:3] for line in again] == [["1", "0"], ["1", "0"]]  # each its own


def test_the_version_is_the_installed_one():
    import importlib.metadata

    import nnmem

    assert nnmem.__version__ == importlib.metadata.version("nnmem")


@needs_jit
def test_import_changes_no_numba_setting_of_the_process(tmp_path):
    """Other Numba code in the user's process keeps Numba's defaults (here: its __pycache__)."""
    (tmp_path / "theirs.py").write_text(
        textwrap.dedent("""
        import numba

        @numba.njit(cache=True)
        def twice(x):
            return 2 * x
    """)
    )
    out = _run(
        """
        import os
        import numba
        def settings():
            config = numba.config
            return config.CACHE_DIR, os.environ.get("NUMBA_CACHE_DIR"), config.BOUNDSCHECK
        before = settings()
        import nnmem, nnmem.kernels.cpu
        after = settings()
        assert before == after, (before, after)
        import theirs
        print(theirs.twice.stats.cache_path)
    """,
        tmp_path,
    )
    assert out == [str(tmp_path / "__pycache__")]


@needs_jit
def test_bounds_checked_code_is_cached_apart(tmp_path):
    """NUMBA_BOUNDSCHECK=1 is not part of Numba's cache key: without a folder of its own, a
    checked run would load the unchecked code an earlier run cached, and check nothing."""
    (tmp_path / "reader.py").write_text(
        textwrap.dedent("""
        from nnmem.kernels.cpu._jit import njit

        def _read(a, i):
            return a[i]

        read = njit(cache=True)(_read)
    """)
    )
    code = """
        import numpy as np
        from reader import read
        try:
            read(np.zeros(4), 4)
            print("unchecked")
        except IndexError:
            print("checked")
        print(read.stats.cache_path)
    """
    cache = str(tmp_path / "cache")
    normal, normal_path = _run(code, tmp_path, NUMBA_CACHE_DIR=cache)
    checked, checked_path = _run(code, tmp_path, NUMBA_CACHE_DIR=cache, NUMBA_BOUNDSCHECK="1")
    normal_again, normal_path_again = _run(code, tmp_path, NUMBA_CACHE_DIR=cache)
    assert (normal, checked, normal_again) == ("unchecked", "checked", "unchecked")
    assert checked_path == normal_path + "-boundscheck"
    assert normal_path_again == normal_path


def _installed(tmp_path):
    """A copy of the clone, and what ``pip install .`` puts in site-packages from it: setuptools'
    build_py, the step of building the wheel that lays the packages out (pyproject.toml's
    package-dir), into tmp_path/site. (pip itself would fetch setuptools and wheel first.)"""
    clone, site = tmp_path / "clone", tmp_path / "site"
    clone.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(os.path.join(ROOT, name), clone)
    for name in ("nnmem", "kernels"):
        ignore = shutil.ignore_patterns("__pycache__")
        shutil.copytree(os.path.join(ROOT, name), clone / name, ignore=ignore)
    build = [sys.executable, "-c", "from setuptools import setup; setup()", "-q", "build_py"]
    done = subprocess.run(
        [*build, "--build-lib", str(site)], cwd=clone, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return clone, site


def _imported_from(cwd, site):
    """Where `nnmem`, nnmem.kernels and nnmem.kernels.cpu come from in a Python started in
    `cwd` with the install `site` and this environment's packages on its path, but without
    ``site`` (-S), so without the editable install of the test environment."""
    packages = [p for p in sys.path if os.path.basename(p) == "site-packages"]
    code = """
        import importlib.util
        import nnmem, nnmem.kernels.cpu, nnmem.kernels.sizes
        print(nnmem.__file__, nnmem.kernels.__file__, nnmem.kernels.cpu.__file__)
        print(importlib.util.find_spec("kernels"))
    """
    files, top_level_kernels = _run(code, cwd, path=[site, *packages], flags=["-S"])
    return [os.path.relpath(f, cwd) for f in files.split()], top_level_kernels


def test_pip_install_lays_kernels_out_as_nnmem_kernels(tmp_path):
    clone, site = _installed(tmp_path)
    files, top_level_kernels = _imported_from(tmp_path, site)
    assert files == [
        os.path.join("site", "nnmem", "__init__.py"),
        os.path.join("site", "nnmem", "kernels", "__init__.py"),
        os.path.join("site", "nnmem", "kernels", "cpu", "__init__.py"),
    ]
    assert top_level_kernels == "None"  # the name `kernels` belongs to another PyPI project
    assert not (site / "kernels").exists()


def test_the_clone_imports_itself_after_pip_install(tmp_path):
    """Started in the clone's root, Python imports the clone's nnmem/ (the current directory is
    first on sys.path), which has no kernels/ of its own: it takes the clone's kernels/ folder,
    not the installed copy beside another nnmem (it failed: "No module named 'nnmem.kernels'")."""
    clone, site = _installed(tmp_path)
    files, _ = _imported_from(clone, site)
    assert files == [
        os.path.join("nnmem", "__init__.py"),
        os.path.join("kernels", "__init__.py"),
        os.path.join("kernels", "cpu", "__init__.py"),
    ]
