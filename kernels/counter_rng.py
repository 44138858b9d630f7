"""A counter-based random number: u(seed, counter, i) in [0, 1), a pure function of its inputs.

Why not a generator object (NumPy's ``default_rng``)? A generator is state on the *host*: a GPU
kernel cannot draw from it, and a replayed graph would need the host between kernels. A
counter-based generator (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011;
cuRAND's Philox and JAX's threefry are of this kind) needs no state but a counter: element i of
draw number `counter` is ``hash(seed, counter, i)``, so

* every element is drawn independently, by as many threads as there are (no shared state);
* the CPU and the CUDA kernels compute bit for bit the same numbers, because this very source is
  compiled by both (``numba.njit`` in kernels/cpu, ``numba.cuda.jit(device=True)`` in
  kernels/cuda);
* eager and replayed steps draw the same masks: the counter lives in device memory and is
  advanced by a kernel, never read by the host.

The hash is SplitMix64's finaliser (Steele, Lea & Flood, OOPSLA 2014), a bijection on 64-bit
integers whose output passes BigCrush. All arithmetic is on uint64 and wraps modulo 2**64 (Numba
does not check integer overflow); every constant and operand is cast to uint64, because Numba
turns uint64 (op) int64 into float64.
"""

import numpy as np

__all__ = ["splitmix64", "counter_uniform"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # 2**64 / golden ratio: SplitMix64's increment
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S40 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(40)
_TWO_POW_MINUS_24 = 2.0**-24


def splitmix64(z):
    """SplitMix64's output function of state `z` (uint64): one step of the generator."""
    z = z + _GOLDEN
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


def counter_uniform(seed, counter, i):
    """Element `i` of draw number `counter` under `seed` (all uint64): a float64 in [0, 1) with
    24 random bits, so the value is exact in float32 as well (the top 24 bits of the hash).

    It is ``splitmix64(splitmix64(seed + splitmix64(counter)) + i) >> 40``, with the three
    rounds written out: Numba compiles a function for the CPU and for CUDA only if every
    function it calls is compiled too, and this way the one source serves both unchanged."""
    z = counter + _GOLDEN  # round 1: mix the draw counter
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    z = (z ^ (z >> _S31)) + seed + _GOLDEN  # round 2: add the seed and mix: the draw's key
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    z = (z ^ (z >> _S31)) + i + _GOLDEN  # round 3: add the element's index and mix
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    z = z ^ (z >> _S31)
    return np.float64(z >> _S40) * _TWO_POW_MINUS_24
