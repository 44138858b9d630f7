"""nnmem's version: the one definition, read by pyproject.toml (setuptools' dynamic version),
``nnmem.__version__`` and ``nnmem --version``."""

__version__ = "0.8.0"
