"""The layers of SINGA's ``layer`` module, one file per kind (nnmem.layer lists them)."""
