"""numba-jitted local kernels: CSR x dense, its transpose, row gather and scatter-add.

All kernels write into caller-provided buffers (the plan owns them), run in parallel over
numba threads, and are cached on disk. CSR x dense is parallel over row chunks balanced by
non-zeros (power-law rows would starve a static row split); the transposed product is
parallel over feature-column ranges, which needs no atomics and no transposed copy of A.
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic

_JIT = dict(parallel=True, cache=True, nogil=True, boundscheck=False)
PREFETCH_DISTANCE = 16  # non-zeros ahead: hides the latency of gathering a random row of x


@intrinsic
def prefetch_row(typingctx, arr, row):
    """Hint the CPU to start loading row ``row`` of 2-D ``arr`` (llvm.prefetch, read, L1)."""
    sig = types.void(arr, row)

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        r = context.cast(builder, args[1], signature.args[1], types.intp)
        zero = context.get_constant(types.intp, 0)
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [r, zero])
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0i8")
        builder.call(fn, [builder.bitcast(ptr, i8p), ir.Constant(i32, 0), ir.Constant(i32, 3),
                          ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return sig, codegen


def column_split(f: int) -> int:
    """How many feature-column ranges to run in parallel: one per thread, >= 8 columns each."""
    return max(1, min(numba.get_num_threads(), f // 8))


def row_chunks(indptr: np.ndarray, n_chunks: int) -> np.ndarray:
    """Row boundaries splitting a CSR into ``n_chunks`` ranges of near-equal work.

    Work of a row = its non-zeros + 1 (the +1 keeps empty rows' zero-fill balanced).
    """
    n = indptr.shape[0] - 1
    n_chunks = max(1, min(n_chunks, n))
    work = indptr.astype(np.int64) + np.arange(n + 1, dtype=np.int64)
    targets = np.linspace(0, work[-1], n_chunks + 1)
    bounds = np.searchsorted(work, targets, side="left").astype(np.int64)
    bounds[0], bounds[-1] = 0, n
    return np.maximum.accumulate(bounds)


@njit(**_JIT)
def csr_matmul(indptr, indices, data, x, out, chunks, accumulate):
    """out (+)= A @ x for CSR A; rows handled in ``chunks`` ranges in parallel."""
    f = x.shape[1]
    last = indices.shape[0] - 1
    for c in prange(chunks.shape[0] - 1):
        for r in range(chunks[c], chunks[c + 1]):
            if not accumulate:
                for t in range(f):
                    out[r, t] = 0
            for k in range(indptr[r], indptr[r + 1]):
                prefetch_row(x, indices[min(k + PREFETCH_DISTANCE, last)])
                j = indices[k]
                a = data[k]
                for t in range(f):
                    out[r, t] += a * x[j, t]


@njit(**_JIT)
def csr_t_matmul(indptr, indices, data, y, out, accumulate, n_par):
    """out (+)= A^T @ y for CSR A, parallel over ``n_par`` column ranges of y (race-free)."""
    n_rows = indptr.shape[0] - 1
    f = y.shape[1]
    if not accumulate:
        for i in prange(out.shape[0]):
            for t in range(f):
                out[i, t] = 0
    width = (f + n_par - 1) // n_par
    for p in prange(n_par):
        lo = p * width
        hi = min(f, lo + width)
        for r in range(n_rows):
            for k in range(indptr[r], indptr[r + 1]):
                j = indices[k]
                a = data[k]
                for t in range(lo, hi):
                    out[j, t] += a * y[r, t]


@njit(**_JIT)
def gather_rows(x, idx, out):
    """out[i] = x[idx[i]]: pack the rows a peer needs into the send buffer."""
    f = x.shape[1]
    for i in prange(idx.shape[0]):
        s = idx[i]
        for t in range(f):
            out[i, t] = x[s, t]


@njit(**_JIT)
def scatter_add(src, idx, out, n_par):
    """out[idx[i]] += src[i], in parallel over ``n_par`` feature ranges (idx may repeat)."""
    f = src.shape[1]
    width = (f + n_par - 1) // n_par
    for p in prange(n_par):
        lo = p * width
        hi = min(f, lo + width)
        for i in range(idx.shape[0]):
            d = idx[i]
            for t in range(lo, hi):
                out[d, t] += src[i, t]
