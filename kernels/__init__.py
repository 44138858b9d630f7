"""The kernel layer: pure Numba functions over arrays (no nnmem imports).
Installed as nnmem.kernels.

"""
