"""How an exchange puts gradients on the wire: plain (float32 or float64 as they are), half
(rounded to float16) or sparse (only the chosen elements), SINGA's three ways (the bytes
themselves: nnmem/communicator.py).

Contract: a Wire is the choice and its parameters; Wire.all_reduce runs the collective on host
values, on the communication stream. check_spars and check_gradient_dtype refuse, before any
exchange starts, what a wire cannot send.
"""

import math

import numpy as np


class Wire:
    """How an exchange puts values on the wire: kind "plain", "half" or "sparse"; clip: the
    bound half clips to first (None: no clipping); spars, top_k: which elements sparse sends;
    corr: sparse keeps what it did not send (the residual) and adds it to the next step's."""

    def __init__(self, kind, clip=None, spars=None, top_k=False, corr=True):
        self.kind, self.clip = kind, clip
        self.spars, self.top_k, self.corr = spars, top_k, corr

    def all_reduce(self, comm, values, kept):
        """Sum the host `values` over the ranks, in place, as this wire sends them (run on the
        communication stream). kept: the residual this exchange kept from the step before
        (None: none yet). Returns the residual the exchange leaves, or None."""
        if self.kind == "plain":
            return comm.allreduce(values)
        if self.clip is not None:
            np.clip(values, -self.clip, self.clip, out=values)
        if self.kind == "half":
            return comm.allreduce_half(values)
        residual = kept if self.corr else None
        if self.corr and residual is None:
            residual = np.zeros(values.shape, np.float32)
        return comm.sparse_allreduce(values, residual, self.spars, self.top_k)


def check_spars(spars, top_k):
    """A sparse wire's spars: a threshold > 0, or with top-K a fraction in (0, 1]."""
    if not (isinstance(spars, (int, float)) and math.isfinite(spars) and spars > 0):
        raise ValueError(f"DistOpt: spars must be a number > 0, got {spars!r}")
    if top_k and spars > 1:
        raise ValueError(
            f"DistOpt: with top-K, spars is the fraction of elements sent, in (0, 1]; got {spars}"
        )


def check_gradient_dtype(param, wire):
    """Refuse a parameter whose gradients `wire` cannot carry: the exchanges take float32 or
    float64 gradients, and half and sparse float32 only."""
    if np.dtype(param.dtype) == np.float16:
        raise TypeError(
            f"DistOpt: parameter {param.name} is float16; the exchanges run on float32 or float64 "
            "gradients (backward_and_update_half sends float16 on the wire): train in float32"
        )
    if wire.kind != "plain" and np.dtype(param.dtype) != np.float32:
        raise TypeError(
            f"DistOpt: {wire.kind} exchanges take float32 gradients, and parameter {param.name} "
            f"is {np.dtype(param.dtype)}; use backward_and_update"
        )
