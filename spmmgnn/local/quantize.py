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

from ..runtime.jit import njit, prange
from .hashing import splitmix64

_JIT = dict(parallel=True, cache=True, nogil=True, boundscheck=False)
CONST, BAD = np.uint16(0xFFFF), np.uint16(0xFFFE)
PARAM_BYTES = 4


def payload_bytes(f: int, bits: int) -> int:
    return max(2, -(-f * bits // 8))


def row_bytes(f: int, bits: int) -> int:
    return PARAM_BYTES + payload_bytes(f, bits)


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
    """Encode row idx[i] of x (row i if idx is empty) into out[i] (see module doc).

    One 64-bit hash per payload byte supplies 16-bit uniforms for its (at most 4) values.
    """
    m = out.shape[0]
    f = x.shape[1]
    use_idx = idx.shape[0] > 0
    per = 8 // bits
    qmax = (1 << bits) - 1
    n_bytes = (f + per - 1) // per
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
        base = splitmix64(key ^ (np.uint64(i) * np.uint64(0xD1B54A32D192ED03)))
        for byte in range(n_bytes):
            h = splitmix64(base + np.uint64(byte))
            acc = 0
            for s in range(min(per, f - byte * per)):
                u = np.float64((h >> np.uint64(16 * s)) & np.uint64(0xFFFF)) * (1.0 / 65536.0)
                q = int((x[r, byte * per + s] - a) * inv + u)  # >= 0: x >= lo
                acc |= min(q, qmax) << (s * bits)
            o[4 + byte] = np.uint8(acc)


@njit(cache=True, inline="always")
def _decode_bytes(buf, i, b0, b1, a, s, per, bits, mask, out, r, accumulate, f):
    for byte in range(b0, b1):
        v = buf[i, 4 + byte]
        for k in range(min(per, f - byte * per)):
            d = a + s * ((v >> (k * bits)) & mask)
            if accumulate:
                out[r, byte * per + k] += d
            else:
                out[r, byte * per + k] = d


@njit(cache=True, inline="always")
def _fill(out, r, t0, t1, value, accumulate):
    for t in range(t0, t1):
        if accumulate:
            out[r, t] += value
        else:
            out[r, t] = value


@njit(**_JIT)
def unpack_dequantize(buf, lo_v, step, kind, const_v, out, idx, accumulate, bits, n_par):
    """out[idx[i]] (+)= decoded row i (row i if idx is empty). kind: 0 data, 1 constant,
    2 non-finite (decodes to NaN). With idx, rows may repeat (several peers add into one row),
    so that case splits the work over ``n_par`` byte-aligned column ranges instead of rows."""
    m = buf.shape[0]
    f = out.shape[1]
    per = 8 // bits
    mask = (1 << bits) - 1
    n_bytes = (f + per - 1) // per
    if idx.shape[0] > 0:
        width = (n_bytes + n_par - 1) // n_par
        for p in prange(n_par):
            b0 = p * width
            b1 = min(n_bytes, b0 + width)
            for i in range(m):
                r = np.int64(idx[i])
                if kind[i] == 0:
                    _decode_bytes(buf, i, b0, b1, lo_v[i], step[i], per, bits, mask, out, r,
                                  accumulate, f)
                else:
                    c = const_v[i] if kind[i] == 1 else np.nan
                    _fill(out, r, min(f, b0 * per), min(f, b1 * per), c, accumulate)
    else:
        for i in prange(m):
            r = np.int64(i)
            if kind[i] == 0:
                _decode_bytes(buf, i, 0, n_bytes, lo_v[i], step[i], per, bits, mask, out, r,
                              accumulate, f)
            else:
                _fill(out, r, 0, f, const_v[i] if kind[i] == 1 else np.nan, accumulate)
