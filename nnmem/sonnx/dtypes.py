"""The element types an imported graph's values take on an nnmem device (one definition for
the importer's inputs, its constants, its casts and a plan's placeholders).

As SINGA's sonnx: integers become int32 (ids, shapes, labels), floats keep their width, and
booleans become float32 0.0 / 1.0, the masks nnmem's ``where`` and arithmetic read. Strings,
bfloat16, the 8-, 4- and 2-bit floats and 64-bit unsigned integers have no nnmem form.
"""

import numpy as np

#: The NumPy dtypes of ONNX element types an nnmem device can hold (converted as device_dtype).
DTYPES = frozenset(
    np.dtype(t) for t in ("float16", "float32", "float64", "int8", "int16", "int32", "int64",
                          "uint8", "uint16", "uint32", "bool")
)  # fmt: skip


def device_dtype(dtype):
    """nnmem's dtype for an ONNX value of `dtype` on a device (see the module's docstring)."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return np.dtype(np.float32)
    return np.dtype(np.int32) if dtype.kind in "iu" else dtype
