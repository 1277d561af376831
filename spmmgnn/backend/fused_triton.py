"""The Triton kernels of ``backend.fused`` (imported on first use: importing Triton takes
about a second, which a rank that never runs them should not pay).

``forward_kernel``: one tile of ``BLOCK_M`` rows x ``BLOCK_N`` columns of
``dropout(relu(z + bias))``, the hash of ``backend.fused``'s docstring in 32-bit lanes
(the row part once per row, the column part once per column, one ``mix32`` per entry).
``backward_kernel``: ``grad * scale`` where ``out > 0``, else 0, and the tile's column sums
(the bias gradient's partial sums, one row of ``part`` per block of rows).

Built for Triton's interpreter when ``TRITON_INTERPRET=1`` is set at import (CPU tensors).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def mix32(x):
    """lowbias32 of a uint32 block (``backend.fused.mix32_torch``'s arithmetic)."""
    x = x ^ (x >> 16)
    x = x * 0x7FEB352D
    x = x ^ (x >> 15)
    x = x * 0x846CA68B
    return x ^ (x >> 16)


@triton.jit(do_not_specialize=["k0", "k1", "col0", "threshold"])
def forward_kernel(z_ptr, b_ptr, ids_ptr, scale_ptr, out_ptr, n, f, k0, k1, col0, threshold,
                   HAS_BIAS: tl.constexpr, DROP: tl.constexpr, BLOCK_M: tl.constexpr,
                   BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rmask, cmask = rows < n, cols < f
    mask = rmask[:, None] & cmask[None, :]
    offs = rows.to(tl.int64)[:, None] * f + cols[None, :]
    v = tl.load(z_ptr + offs, mask=mask, other=0.0)
    if HAS_BIAS:
        v = v + tl.load(b_ptr + cols, mask=cmask, other=0.0)[None, :]
    if DROP:
        w0 = k0.to(tl.uint32, bitcast=True)
        w1 = k1.to(tl.uint32, bitcast=True)
        ids = tl.load(ids_ptr + rows, mask=rmask, other=0)
        row = mix32(mix32(ids.to(tl.uint32) ^ w0) ^ (ids >> 32).to(tl.uint32) ^ w1)
        col = mix32(((cols + col0).to(tl.uint32) * 0x9E3779B9) ^ w1)
        h = mix32(row[:, None] ^ col[None, :])
        keep = (h >> 8).to(tl.int32) >= threshold
        kept = tl.where(keep, v * tl.load(scale_ptr), 0.0)
    else:
        kept = v
    out = tl.where(v > 0, kept, tl.where(v != v, v, 0.0))  # NaN stays NaN
    tl.store(out_ptr + offs, out.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def backward_kernel(out_ptr, g_ptr, scale_ptr, gin_ptr, part_ptr, n, f,
                    HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    cmask = cols < f
    mask = (rows < n)[:, None] & cmask[None, :]
    offs = rows.to(tl.int64)[:, None] * f + cols[None, :]
    out = tl.load(out_ptr + offs, mask=mask, other=0.0)
    g = tl.load(g_ptr + offs, mask=mask, other=0.0)
    gin = tl.where(out > 0, g * tl.load(scale_ptr), 0.0)
    tl.store(gin_ptr + offs, gin.to(gin_ptr.dtype.element_ty), mask=mask)
    if HAS_BIAS:
        tl.store(part_ptr + pid.to(tl.int64) * f + cols, tl.sum(gin, axis=0), mask=cmask)


def interpreted() -> bool:
    """True when these kernels were built for Triton's interpreter."""
    return type(forward_kernel).__name__ == "InterpretedFunction"
