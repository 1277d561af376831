"""numba kernels for stochastic integer quantization of rows, bit-packed.

Row format (``row_bytes = 4 + max(2, ceil(f * bits / 8))``)::

    [lo: bf16 bits][hi: bf16 bits][payload: f values of ``bits`` bits, packed little-end first]

``lo`` is the row minimum rounded down to bfloat16 and ``hi`` the maximum rounded up, so the
row lies inside [lo, hi]; with ``step = (hi - lo) / (2^bits - 1)`` each value is sent as
``q = floor((x - lo) / step + u)``, u uniform in [0, 1): unbiased, error < one step.
A constant row is sent exactly: ``hi`` holds the marker 0xFFFF and the float32 value is split
over the ``lo`` slot (high half) and the first two payload bytes (low half). A row with NaN or
Inf gets the marker 0xFFFE, decodes to NaN, and is counted so the caller can raise.
Uniforms come from a counter-based hash (splitmix64 of key and element index), so the result
does not depend on the number of threads.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

_JIT = dict(parallel=True, cache=True, nogil=True, boundscheck=False)
CONST, BAD = np.uint16(0xFFFF), np.uint16(0xFFFE)
PARAM_BYTES = 4


def payload_bytes(f: int, bits: int) -> int:
    return max(2, -(-f * bits // 8))


def row_bytes(f: int, bits: int) -> int:
    return PARAM_BYTES + payload_bytes(f, bits)


@njit(cache=True, inline="always")
def splitmix64(z):
    z = z + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@njit(**_JIT)
def row_range(x, idx, lo, hi, bad):
    """lo/hi = min/max of row idx[i] of x (all rows if idx is empty); bad[i] = non-finite."""
    m = lo.shape[0]
    f = x.shape[1]
    use_idx = idx.shape[0] > 0
    for i in prange(m):
        r = np.int64(idx[i]) if use_idx else np.int64(i)
        a = np.inf
        b = -np.inf
        ok = True
        for t in range(f):
            v = x[r, t]
            if not np.isfinite(v):
                ok = False
            a = min(a, v)
            b = max(b, v)
        lo[i] = a
        hi[i] = b
        bad[i] = not ok


def bf16_outward(lo: np.ndarray, hi: np.ndarray):
    """bf16 bit patterns of lo rounded toward -inf and hi rounded toward +inf (vectorized)."""
    def round_bits(v: np.ndarray, up: bool) -> np.ndarray:
        b = v.astype(np.float32).view(np.uint32)
        neg = (b >> 31).astype(bool)
        trunc = b & np.uint32(0xFFFF0000)
        inexact = (b & np.uint32(0xFFFF)) != 0
        away = inexact & (neg != up)  # magnitude grows when rounding away from zero
        return ((trunc + np.where(away, 0x10000, 0).astype(np.uint32)) >> 16).astype(np.uint16)

    return round_bits(lo, up=False), round_bits(hi, up=True)


def bf16_value(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


@njit(**_JIT)
def quantize_pack(x, idx, lo_v, step, lo_bits, hi_bits, const_bits, out, bits, key):
    """Encode row idx[i] of x (row i if idx is empty) into out[i] (see module doc)."""
    m = out.shape[0]
    f = x.shape[1]
    use_idx = idx.shape[0] > 0
    per = 8 // bits
    qmax = (1 << bits) - 1
    for i in prange(m):
        r = np.int64(idx[i]) if use_idx else np.int64(i)
        o = out[i]
        o[0] = np.uint8(lo_bits[i] & 0xFF)
        o[1] = np.uint8(lo_bits[i] >> 8)
        o[2] = np.uint8(hi_bits[i] & 0xFF)
        o[3] = np.uint8(hi_bits[i] >> 8)
        for t in range(4, o.shape[0]):
            o[t] = 0
        if hi_bits[i] == 0xFFFF:  # constant row: low half of the float32 after lo slot
            o[4] = np.uint8(const_bits[i] & 0xFF)
            o[5] = np.uint8((const_bits[i] >> 8) & 0xFF)
            continue
        if hi_bits[i] == 0xFFFE:
            continue
        a = lo_v[i]
        inv = 1.0 / step[i]
        base = splitmix64(key ^ np.uint64(i) * np.uint64(0xD1B54A32D192ED03))
        acc = 0
        for t in range(f):
            h = splitmix64(base + np.uint64(t))
            u = np.float64(h >> np.uint64(40)) * (1.0 / 16777216.0)
            q = int(np.floor((x[r, t] - a) * inv + u))
            q = min(max(q, 0), qmax)
            acc |= q << ((t % per) * bits)
            if t % per == per - 1:
                o[4 + t // per] = np.uint8(acc)
                acc = 0
        if f % per:
            o[4 + (f - 1) // per] = np.uint8(acc)


@njit(cache=True, inline="always")
def _decode_value(buf, i, t, kind, a, s, c, per, bits, mask):
    if kind == 0:
        return a + s * ((buf[i, 4 + t // per] >> ((t % per) * bits)) & mask)
    if kind == 1:
        return c
    return np.nan


@njit(**_JIT)
def unpack_dequantize(buf, lo_v, step, kind, const_v, out, idx, accumulate, bits, n_par):
    """out[idx[i]] (+)= decoded row i (row i if idx is empty). kind: 0 data, 1 constant,
    2 non-finite (decodes to NaN). With idx, rows may repeat (several peers add into one row),
    so that case splits the work over ``n_par`` column ranges instead of rows."""
    m = buf.shape[0]
    f = out.shape[1]
    per = 8 // bits
    mask = (1 << bits) - 1
    if idx.shape[0] > 0:
        width = (f + n_par - 1) // n_par
        for p in prange(n_par):
            for i in range(m):
                r = idx[i]
                for t in range(p * width, min(f, (p + 1) * width)):
                    v = _decode_value(buf, i, t, kind[i], lo_v[i], step[i], const_v[i],
                                      per, bits, mask)
                    if accumulate:
                        out[r, t] += v
                    else:
                        out[r, t] = v
    else:
        for i in prange(m):
            for t in range(f):
                v = _decode_value(buf, i, t, kind[i], lo_v[i], step[i], const_v[i],
                                  per, bits, mask)
                if accumulate:
                    out[i, t] += v
                else:
                    out[i, t] = v
