"""How packed rows travel: a codec turns rows into fixed-width byte rows and back.

``encode(x, idx, out, key)`` packs rows ``x[idx]`` (all rows if idx is empty) into the uint8
matrix ``out`` (one row per message row, ``row_bytes(f)`` wide) and returns how many rows held
NaN/Inf. ``decode(buf, out, idx, accumulate)`` writes (or adds) the rows into ``out[idx]``.
Gather is fused into encoding and scatter-add into decoding, so no temporary of the
uncompressed size is needed beyond the buffers the exchange holds anyway.

Registered by name: ``float32``, ``float16``, ``bfloat16`` (casts) and ``int8``, ``int4``,
``int2`` (stochastic quantization, see ``quantize``). ``None`` means rows travel as they are.
"""

from __future__ import annotations

import numpy as np

from ..runtime.errors import SpmmgnnError
from . import kernels, quantize

CHUNK_ROWS = 4096  # bounds the temporaries of the cast codecs


class Codec:
    name = "codec"
    param_bytes = 0

    def row_bytes(self, f: int) -> int:
        raise NotImplementedError

    def encode(self, x: np.ndarray, idx: np.ndarray, out: np.ndarray, key: int) -> int:
        raise NotImplementedError

    def decode(self, buf: np.ndarray, out: np.ndarray, idx: np.ndarray,
               accumulate: bool) -> None:
        raise NotImplementedError


def _to_bf16(x: np.ndarray) -> np.ndarray:
    """float -> bfloat16 bits, round to nearest even (NaN stays NaN)."""
    b = x.astype(np.float32).view(np.uint32)
    rounded = (b + np.uint32(0x7FFF) + ((b >> 16) & np.uint32(1))) >> 16
    return np.where(np.isnan(x), np.uint32(0x7FC0), rounded).astype(np.uint16)


class CastCodec(Codec):
    """Rows cast to a narrower float type (round to nearest even)."""

    def __init__(self, name: str, wire: str):
        self.name, self.wire = name, wire
        self.itemsize = 4 if wire == "float32" else 2

    def row_bytes(self, f: int) -> int:
        return f * self.itemsize

    def _pack(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(wire bytes, per-row finiteness after the cast: catches NaN/Inf and overflow)."""
        if self.wire == "bfloat16":
            bits = _to_bf16(rows)
            finite = ((bits & np.uint16(0x7F80)) != np.uint16(0x7F80)).all(axis=1)
            return bits.view(np.uint8), finite
        with np.errstate(over="ignore"):
            cast = rows.astype(self.wire)
        return cast.view(np.uint8), np.isfinite(cast).all(axis=1)

    def _unpack(self, raw: np.ndarray, dtype) -> np.ndarray:
        if self.wire == "bfloat16":
            return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32).astype(dtype)
        return raw.view(self.wire).astype(dtype)

    def encode(self, x, idx, out, key) -> int:
        m, bad = out.shape[0], 0
        for a in range(0, m, CHUNK_ROWS):
            b = min(m, a + CHUNK_ROWS)
            packed, finite = self._pack(x[idx[a:b]] if idx.size else x[a:b])
            out[a:b] = packed.reshape(b - a, -1)
            bad += int((~finite).sum())
        return bad

    def decode(self, buf, out, idx, accumulate) -> None:
        m = buf.shape[0]
        for a in range(0, m, CHUNK_ROWS):
            b = min(m, a + CHUNK_ROWS)
            rows = self._unpack(np.ascontiguousarray(buf[a:b]), out.dtype).reshape(b - a, -1)
            if idx.size:
                if accumulate:
                    kernels.scatter_add(rows, idx[a:b], out, kernels.column_split(rows.shape[1]))
                else:
                    out[idx[a:b]] = rows
            elif accumulate:
                out[a:b] += rows
            else:
                out[a:b] = rows


class IntCodec(Codec):
    """Stochastic ``bits``-bit quantization with a per-row bf16 [lo, hi] range (4 bytes)."""

    param_bytes = quantize.PARAM_BYTES

    def __init__(self, bits: int):
        self.bits = bits
        self.name = f"int{bits}"
        self.qmax = (1 << bits) - 1

    def row_bytes(self, f: int) -> int:
        return quantize.row_bytes(f, self.bits)

    def params(self, lo_bits, hi_bits, const_low):
        """(lo value, step, kind, constant value) from the wire parameters; the encoder uses
        this same function, so both sides compute bit-identical steps."""
        kind = np.where(hi_bits == quantize.CONST, 1, np.where(hi_bits == quantize.BAD, 2, 0))
        data = kind == 0
        lo_v = np.where(data, quantize.bf16_value(lo_bits), 0).astype(np.float64)
        hi_v = np.where(data, quantize.bf16_value(hi_bits), 0).astype(np.float64)
        step = (hi_v - lo_v) / self.qmax
        const_bits = (lo_bits.astype(np.uint32) << 16) | const_low.astype(np.uint32)
        const_v = np.where(kind == 1, const_bits.view(np.float32), 0).astype(np.float64)
        return lo_v, step, kind.astype(np.int8), const_v

    def encode(self, x, idx, out, key) -> int:
        m = out.shape[0]
        lo, hi, bad = np.empty(m), np.empty(m), np.empty(m, dtype=np.bool_)
        quantize.row_range(x, idx, lo, hi, bad)
        with np.errstate(invalid="ignore", over="ignore"):
            lo_bits, hi_bits = quantize.bf16_outward(np.where(bad, 0, lo), np.where(bad, 0, hi))
            bad |= ~np.isfinite(quantize.bf16_value(hi_bits)) | ~np.isfinite(
                quantize.bf16_value(lo_bits))
        const = (lo == hi) & ~bad
        value_bits = np.where(const, lo, 0).astype(np.float32).view(np.uint32)
        lo_bits = np.where(const, value_bits >> 16, np.where(bad, 0, lo_bits)).astype(np.uint16)
        hi_bits = np.where(const, quantize.CONST, np.where(bad, quantize.BAD, hi_bits))
        hi_bits = hi_bits.astype(np.uint16)
        const_low = (value_bits & np.uint32(0xFFFF)).astype(np.uint16)
        lo_v, step, _, _ = self.params(lo_bits, hi_bits, const_low)
        quantize.quantize_pack(x, idx, lo_v, step, lo_bits, hi_bits, const_low, out,
                               self.bits, np.uint64(key))
        return int(bad.sum())

    def decode(self, buf, out, idx, accumulate) -> None:
        p = np.ascontiguousarray(buf[:, :6]).view(np.uint16)
        lo_v, step, kind, const_v = self.params(p[:, 0], p[:, 1], p[:, 2])
        quantize.unpack_dequantize(buf, lo_v, step, kind, const_v, out, idx, accumulate,
                                   self.bits, kernels.column_split(out.shape[1]))


CODECS: dict[str, Codec] = {c.name: c for c in (
    CastCodec("float32", "float32"), CastCodec("float16", "float16"),
    CastCodec("bfloat16", "bfloat16"), IntCodec(8), IntCodec(4), IntCodec(2))}


def get_codec(name: str | None) -> Codec | None:
    """The codec registered as ``name``; None / "none" means rows travel uncompressed."""
    if name is None or name == "none":
        return None
    if name not in CODECS:
        raise SpmmgnnError(f"unknown codec {name!r}; choose one of none, {', '.join(CODECS)}")
    return CODECS[name]
