"""The one counter-based hash of the project: splitmix64.

Every random choice that must not depend on the number of ranks, threads or the call order
(stochastic rounding of the codecs, dropout masks, label-propagation and probe vectors) is a
splitmix64 of integer keys: ``mix64`` derives keys in Python, ``splitmix64`` is the same
function inside numba kernels, ``uniform_by_id`` gives vectorized uniforms per vertex id.
"""

from __future__ import annotations

import numpy as np
from numba import njit

GOLDEN = 0x9E3779B97F4A7C15
_M64 = 0xFFFFFFFFFFFFFFFF


@njit(cache=True, inline="always")
def splitmix64(z):
    """One splitmix64 step of a uint64 (numba; the same arithmetic as ``mix64``)."""
    z = z + np.uint64(GOLDEN)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def mix64(*words: int) -> int:
    """splitmix64 folded over a sequence of integers: a 64-bit key from (seed, epoch, ...)."""
    z = 0
    for w in words:
        z = (z ^ (int(w) & _M64)) + GOLDEN & _M64
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9 & _M64
        z = (z ^ (z >> 27)) * 0x94D049BB133111EB & _M64
        z ^= z >> 31
    return z


def uniform_by_id(ids: np.ndarray, seed: int) -> np.ndarray:
    """A uniform value in [0, 1) per id: splitmix64 of (seed, id), vectorized."""
    with np.errstate(over="ignore"):
        z = np.asarray(ids).astype(np.uint64) ^ np.uint64((int(seed) * GOLDEN) & _M64)
        z = z + np.uint64(GOLDEN)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
    return (z >> np.uint64(11)).astype(np.float64) * (1.0 / 2**53)
