"""The integer codecs (int8, int4, int2: ``quantize``) in torch operations, for device grids.

``encode`` writes the very bytes ``codecs.IntCodec.encode`` writes (row format in
``quantize``: bf16 [lo, hi] rounded outward, the constant and non-finite markers, stochastic
rounding by the splitmix64 of (key, row, payload byte), values packed little end first), and
``decode`` returns what ``IntCodec.decode`` writes, bit for bit: every step is the numba
kernels' arithmetic in the same order and precision (float64 for the values, int64 for the
bits; torch runs each elementwise operation as its own kernel, so nothing is fused into an
FMA the kernels do not use). So a device grid quantizes, packs and unpacks on the device and
only the packed bytes leave it; ``device="cpu"`` runs the same functions CI tests.
"""

from __future__ import annotations

from ..local.hashing import signed64, splitmix64_torch
from ..local.quantize import PARAM_BYTES, payload_bytes

ROW = 0xD1B54A32D192ED03  # the per-row stride of ``quantize.quantize_pack``'s keys
CONST, BAD = 0xFFFF, 0xFFFE
CHUNK_ROWS = 1 << 16  # rows encoded or decoded at once: bounds the temporaries


def _float32_of_bits(bits):
    """The float32 whose bits are the low 32 bits of int64 tensor ``bits``."""
    import torch

    b = bits & 0xFFFFFFFF
    return torch.where(b >= 1 << 31, b - (1 << 32), b).to(torch.int32).view(torch.float32)


def _bits_of_float32(v):
    """The uint32 bits of float32 tensor ``v`` as non-negative int64."""
    import torch

    return v.view(torch.int32).to(torch.int64) & 0xFFFFFFFF


def _bf16_outward(v, up: bool):
    """``quantize.bf16_outward`` of a float32 tensor: bf16 bits rounded toward -inf (``up``
    False) or +inf, as int64."""
    b = _bits_of_float32(v)
    neg = (b >> 31) != 0
    inexact = (b & 0xFFFF) != 0
    away = inexact & (neg != up)  # the magnitude grows when rounding away from zero
    return (((b & 0xFFFF0000) + away.to(b.dtype) * 0x10000) >> 16) & 0xFFFF


def _params(bits: int, lo_bits, hi_bits, const_low):
    """``IntCodec.params`` in torch: (lo value, step, kind, constant value), float64."""
    import torch

    kind = torch.where(hi_bits == CONST, 1, torch.where(hi_bits == BAD, 2, 0))
    data = kind == 0
    zero = torch.zeros((), dtype=torch.float64, device=lo_bits.device)
    lo_v = torch.where(data, _float32_of_bits(lo_bits << 16).to(torch.float64), zero)
    hi_v = torch.where(data, _float32_of_bits(hi_bits << 16).to(torch.float64), zero)
    # a device tensor divisor: CUDA torch turns division by a Python number into a product
    # with its reciprocal, which is not the numba codec's correctly rounded quotient
    step = (hi_v - lo_v) / hi_v.new_tensor(float((1 << bits) - 1))
    const_v = torch.where(kind == 1, _float32_of_bits((lo_bits << 16) | const_low)
                          .to(torch.float64), zero)
    return lo_v, step, kind, const_v


def _row_params(x):
    """Per row of ``x``: (lo bits, hi bits, constant's low half, non-finite) as
    ``IntCodec.encode`` computes them (int64 bits, bool)."""
    import torch

    bad = ~torch.isfinite(x).all(dim=1)
    lo, hi = x.amin(dim=1), x.amax(dim=1)
    zero = torch.zeros((), dtype=x.dtype, device=x.device)
    lo_bits = _bf16_outward(torch.where(bad, zero, lo).to(torch.float32), up=False)
    hi_bits = _bf16_outward(torch.where(bad, zero, hi).to(torch.float32), up=True)
    # a bound that rounds to a non-finite bf16 (exponent all ones) marks the row bad too
    bad |= ((hi_bits & 0x7F80) == 0x7F80) | ((lo_bits & 0x7F80) == 0x7F80)
    const = (lo == hi) & ~bad
    value = _bits_of_float32(torch.where(const, lo, zero).to(torch.float32))
    lo_bits = torch.where(const, value >> 16, torch.where(bad, 0, lo_bits))
    hi_bits = torch.where(const, CONST, torch.where(bad, BAD, hi_bits))
    return lo_bits, hi_bits, value & 0xFFFF, bad


def encode(bits: int, x, key: int):
    """(``m x row_bytes`` uint8 tensor, rows with NaN/Inf): rows ``x`` (float32 or float64,
    on its device) packed as ``IntCodec(bits).encode(x, NO_INDEX, out, key)`` packs them,
    ``CHUNK_ROWS`` rows at a time (the float64 and int64 temporaries stay bounded)."""
    import torch

    m, f = x.shape
    out = torch.zeros((m, PARAM_BYTES + payload_bytes(f, bits)), dtype=torch.uint8,
                      device=x.device)
    bad = 0
    for a in range(0, m, CHUNK_ROWS):
        bad += _encode_rows(bits, x[a:a + CHUNK_ROWS], key, a, out[a:a + CHUNK_ROWS])
    return out, bad


def _encode_rows(bits: int, x, key: int, first: int, out) -> int:
    """Rows ``first, first + 1, ...`` of a message (their index keys the random draws) into
    the zeroed ``out``; returns how many held NaN/Inf."""
    import torch

    m, f = x.shape
    per, qmax = 8 // bits, (1 << bits) - 1
    n_bytes = -(-f // per)
    dev = x.device
    lo_bits, hi_bits, const_low, bad = _row_params(x)
    lo_v, step, kind, _ = _params(bits, lo_bits, hi_bits, const_low)
    data = kind == 0
    for col, word in enumerate((lo_bits, lo_bits >> 8, hi_bits, hi_bits >> 8)):
        out[:, col] = (word & 0xFF).to(torch.uint8)
    one = torch.ones((), dtype=torch.float64, device=dev)
    inv = (1.0 / torch.where(data, step, one))[:, None]
    rows = torch.arange(first, first + m, dtype=torch.int64, device=dev) * signed64(ROW)
    base = splitmix64_torch(signed64(key) ^ rows)
    h = splitmix64_torch(base[:, None] + torch.arange(n_bytes, dtype=torch.int64,
                                                      device=dev)[None, :])
    xd = x.to(torch.float64)
    if n_bytes * per != f:  # the last byte's missing values: padded, masked below
        xd = torch.cat([xd, xd.new_zeros((m, n_bytes * per - f))], dim=1)
    xd = xd.reshape(m, n_bytes, per)
    a = lo_v[:, None]
    acc = torch.zeros((m, n_bytes), dtype=torch.int64, device=dev)
    byte = torch.arange(n_bytes, device=dev)
    for s in range(per):
        u = ((h >> (16 * s)) & 0xFFFF).to(torch.float64) * (1.0 / 65536.0)
        # truncation toward zero and the clamp above only, as the kernel's int() and min()
        q = ((xd[:, :, s] - a) * inv + u).to(torch.int64).clamp_max(qmax)
        acc |= torch.where(byte * per + s < f, q, 0) << (s * bits)
    out[:, PARAM_BYTES:PARAM_BYTES + n_bytes] = torch.where(
        data[:, None], acc & 0xFF, 0).to(torch.uint8)
    const = kind == 1  # a constant row: the float32's low half after the lo slot
    out[:, 4] = torch.where(const, const_low & 0xFF, out[:, 4].to(torch.int64)).to(torch.uint8)
    out[:, 5] = torch.where(const, const_low >> 8, out[:, 5].to(torch.int64)).to(torch.uint8)
    return int(bad.sum())


def decode(bits: int, buf, f: int, dtype):
    """The ``m x f`` rows of ``dtype`` that ``IntCodec(bits).decode`` writes from the packed
    uint8 tensor ``buf`` (on its device): data rows ``lo + step * q`` in float64, rounded to
    ``dtype``; constant rows their value; non-finite rows NaN (``CHUNK_ROWS`` at a time)."""
    import torch

    out = torch.empty((buf.shape[0], f), dtype=dtype, device=buf.device)
    for a in range(0, buf.shape[0], CHUNK_ROWS):
        out[a:a + CHUNK_ROWS] = _decode_rows(bits, buf[a:a + CHUNK_ROWS], f, dtype)
    return out


def _decode_rows(bits: int, buf, f: int, dtype):
    """``decode`` of the packed rows ``buf`` (one chunk)."""
    import torch

    m = buf.shape[0]
    per, mask = 8 // bits, (1 << bits) - 1
    n_bytes = -(-f // per)
    b = buf[:, :PARAM_BYTES + n_bytes].to(torch.int64)
    lo_bits, hi_bits = b[:, 0] | (b[:, 1] << 8), b[:, 2] | (b[:, 3] << 8)
    const_low = buf[:, 4].to(torch.int64) | (buf[:, 5].to(torch.int64) << 8)
    lo_v, step, kind, const_v = _params(bits, lo_bits, hi_bits, const_low)
    payload = b[:, PARAM_BYTES:]
    q = torch.stack([(payload >> (s * bits)) & mask for s in range(per)], dim=2)
    q = q.reshape(m, n_bytes * per)[:, :f].to(torch.float64)
    values = step[:, None] * q
    values = lo_v[:, None] + values
    special = torch.where(kind == 1, const_v, torch.full_like(const_v, float("nan")))
    return torch.where((kind == 0)[:, None], values, special[:, None]).to(dtype)
