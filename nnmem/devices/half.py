"""float16 as a storage dtype: tensors hold half-precision bytes, kernels compute in float32.

Half precision halves the memory of every activation, gradient and parameter stored in it,
which is what a memory framework is after. The arithmetic is another matter: Numba's CPU
target has no float16 kernels for most operations (and a CPU has no fast float16 units), so a
kernel call that touches float16 tensors runs on float32 copies of its arrays, and the
results are rounded back into the float16 bytes of the tensors it writes. The copies are
host temporaries that live only for the call (on the CPU device, the pool holds float16 only).
Rounding happens at every stored tensor, as in mixed-precision training with float16 storage.
"""

import numpy as np

FLOAT16 = np.dtype(np.float16)


def touches_float16(tensors):
    return any(t.dtype == FLOAT16 for t in tensors)


def widened(fn, n_writes):
    """``fn`` run on float32 copies of its float16 arrays; the first `n_writes` arrays (the
    outputs, ``fn(*writes, *reads)``) get the results back, rounded to float16.

    A read that is also written (in place) is copied once, so the kernel sees one array."""

    def run(*arrays):
        wide = {}
        args = []
        for a in arrays:
            if a.dtype == FLOAT16:
                key = (a.__array_interface__["data"][0], a.shape)
                if key not in wide:
                    wide[key] = a.astype(np.float32)
                args.append(wide[key])
            else:
                args.append(a)
        fn(*args)
        for a, w in zip(arrays[:n_writes], args[:n_writes]):
            if a.dtype == FLOAT16:
                a[...] = w

    run.__wrapped__ = fn
    return run
