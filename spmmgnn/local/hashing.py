"""The one counter-based hash of the project: splitmix64.

Every random choice that must not depend on the number of ranks, threads or the call order
(stochastic rounding of the codecs, dropout masks, label-propagation and probe vectors) is a
splitmix64 of integer keys: ``mix64`` derives keys in Python, ``splitmix64`` is the same
function inside numba kernels, ``splitmix64_torch`` on int64 torch tensors (device dropout,
device codecs), ``uniform_by_id`` gives vectorized uniforms per vertex id.
"""

from __future__ import annotations

import numpy as np

from ..runtime.jit import njit, prange

GOLDEN = 0x9E3779B97F4A7C15
_M64 = 0xFFFFFFFFFFFFFFFF


@njit(cache=True, inline="always")
def splitmix64(z):
    """One splitmix64 step of a uint64 (numba; the same arithmetic as ``mix64``)."""
    z = z + np.uint64(GOLDEN)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def signed64(c: int) -> int:
    """The int64 with the bits of uint64 ``c`` (torch has no uint64 arithmetic)."""
    c &= _M64
    return c - (1 << 64) if c >= 1 << 63 else c


def shr64(z, s: int):
    """Logical right shift of an int64 torch tensor ``z`` by ``s`` bits (1..63; torch's
    ``>>`` is arithmetic)."""
    return (z >> s) & ((1 << (64 - s)) - 1)


def splitmix64_torch(z):
    """``splitmix64`` elementwise on an int64 torch tensor (uint64 bits in int64): int64
    multiplication and addition wrap modulo 2**64 like uint64's and XOR is the same on the
    bits, so the device runs the very hash the numba kernels do (no torch import here)."""
    z = z + signed64(GOLDEN)
    z = (z ^ shr64(z, 30)) * signed64(0xBF58476D1CE4E5B9)
    z = (z ^ shr64(z, 27)) * signed64(0x94D049BB133111EB)
    return z ^ shr64(z, 31)


KEEP_BITS = 24  # dropout compares this many bits of an entry's hash with the threshold


def keep_threshold(p: float) -> int:
    """Dropout keeps an entry when the top ``KEEP_BITS`` bits of its hash are at least this
    (``round(p * 2**KEEP_BITS)``: 0 keeps all, ``2**KEEP_BITS`` drops all)."""
    return min(1 << KEEP_BITS, int(round(p * (1 << KEEP_BITS))))


def mix64(*words: int) -> int:
    """splitmix64 folded over a sequence of integers: a 64-bit key from (seed, epoch, ...)."""
    z = 0
    for w in words:
        z = (z ^ (int(w) & _M64)) + GOLDEN & _M64
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9 & _M64
        z = (z ^ (z >> 27)) * 0x94D049BB133111EB & _M64
        z ^= z >> 31
    return z


def hash_ids(ids: np.ndarray, seed: int) -> np.ndarray:
    """splitmix64 of (seed, id) per id, vectorized: uint64."""
    with np.errstate(over="ignore"):
        z = np.asarray(ids).astype(np.uint64) ^ np.uint64((int(seed) * GOLDEN) & _M64)
        z = z + np.uint64(GOLDEN)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
    return z


def uniform_by_id(ids: np.ndarray, seed: int) -> np.ndarray:
    """A uniform value in [0, 1) per id: splitmix64 of (seed, id), vectorized."""
    return (hash_ids(ids, seed) >> np.uint64(11)).astype(np.float64) * (1.0 / 2**53)


@njit(parallel=True, cache=True, nogil=True)
def _row_hashes(words, out):
    for i in prange(words.shape[0]):
        h = np.uint64(words.shape[1])
        for k in range(words.shape[1]):
            h = splitmix64(h ^ np.uint64(words[i, k]))
        out[i] = h


def hash_rows(a: np.ndarray) -> np.ndarray:
    """One uint64 per row of a 2-D array, a hash of the row's bytes (order-sensitive within
    the row): rows with the same bytes hash the same wherever they live."""
    a = np.ascontiguousarray(a)
    rows = a.shape[0]
    if a.size == 0:  # an empty block row, or no columns: reshape cannot infer -1
        return np.zeros(rows, dtype=np.uint64)
    flat = a.reshape(rows, -1).view(np.uint8)
    pad = (-flat.shape[1]) % 8
    if pad:
        flat = np.concatenate([flat, np.zeros((rows, pad), dtype=np.uint8)], axis=1)
    out = np.empty(rows, dtype=np.uint64)
    _row_hashes(np.ascontiguousarray(flat).view(np.uint64), out)
    return out


def keyed_sum(ids: np.ndarray, values: np.ndarray, seed: int) -> np.uint64:
    """Sum mod 2**64 of a hash of each (id, value): independent of the order of the rows, so
    partial sums of any split of the rows add up to the same total."""
    z = hash_ids(hash_ids(ids, seed) ^ np.asarray(values, dtype=np.uint64), 0)
    with np.errstate(over="ignore"):
        return np.add.reduce(z, dtype=np.uint64) if z.size else np.uint64(0)
