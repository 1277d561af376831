"""numba-jitted local kernels: CSR x dense, its transpose, row gather and scatter-add.

All kernels write into caller-provided buffers (the plan owns them), run in parallel over
numba threads, and are cached on disk. CSR x dense is parallel over row chunks balanced by
non-zeros (power-law rows would starve a static row split). Its cache-blocked variant walks
the columns of A in blocks whose rows of x fit in the last-level cache (DistGNN §4). The
transposed product without a transposed copy (``csr_t_matmul``) and the scatter-add split
feature columns and destination rows between threads, so neither needs atomics and both use
every thread below 16 columns too (scatter-add from 4 on); ``LocalCSR`` uses a transposed CSR
for A^T, measured faster at every width.
"""

from __future__ import annotations

import numpy as np

from ..runtime.jit import lazy, njit, prange
from ..runtime.machine import llc_bytes

_JIT = dict(parallel=True, cache=True, nogil=True, boundscheck=False)
_SERIAL = dict(cache=True, nogil=True, boundscheck=False)  # the serial twins (``*_serial``)
# work (entries touched: (non-zeros + rows) x columns) below which a call runs a kernel's
# serial twin: a parallel launch costs ~2-9 us even on one thread (bench/percall.py), more
# than such a product; a twin is its own function (numba caches by function name)
SERIAL_WORK = 1 << 16
PREFETCH_DISTANCE = 16  # non-zeros ahead: hides the latency of gathering a random row of x
UNROLL_MIN_F = 32  # columns from which the blocked kernel unrolls four non-zeros per pass


def _make_prefetch_row():
    """The ``prefetch_row`` intrinsic (built when a kernel first needs it)."""
    from llvmlite import ir
    from numba import types
    from numba.core import cgutils
    from numba.extending import intrinsic

    @intrinsic
    def prefetch_row(typingctx, arr, row):
        """Hint the CPU to start loading row ``row`` of 2-D ``arr`` (llvm.prefetch, read,
        L1)."""
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
            builder.call(fn, [builder.bitcast(ptr, i8p), ir.Constant(i32, 0),
                              ir.Constant(i32, 3), ir.Constant(i32, 1)])
            return context.get_dummy_value()

        return sig, codegen

    return prefetch_row


prefetch_row = lazy(_make_prefetch_row, globals())


# the last-level cache the blocking plans for (``machine.llc_bytes``, which reads
# ``$SPMMGNN_LLC_BYTES``); None until the first ``llc()``, so a bad setting is an error of
# the call that needs it, not of ``import spmmgnn``
LLC_BYTES: int | None = None


def llc() -> int:
    """``LLC_BYTES``, probed on first use."""
    global LLC_BYTES
    if LLC_BYTES is None:
        LLC_BYTES = llc_bytes()
    return LLC_BYTES


def column_split(f: int) -> int:
    """How many feature-column ranges to run in parallel: one per thread, >= 8 columns each."""
    from ..runtime.threads import get_threads

    return max(1, min(get_threads(), f // 8))


def row_split(n_par: int) -> int:
    """Output-row ranges that, times ``n_par`` column ranges, give every thread a task."""
    from ..runtime.threads import get_threads

    return max(1, -(-get_threads() // max(1, n_par)))


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


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def row_product(indptr, indices, data, x, out, r, last, unroll):
    """out[r] += sum_k data[k] * x[indices[k]] over row r, one term at a time in column
    order (so every variant rounds alike). With ``unroll``, four non-zeros per pass over
    out[r]: a quarter of the loads and stores of out."""
    f = x.shape[1]
    k = indptr[r]
    end = indptr[r + 1]
    if unroll:
        while k + 4 <= end:
            for d in range(4):
                prefetch_row(x, indices[min(k + PREFETCH_DISTANCE + d, last)])
            j0, j1, j2, j3 = indices[k], indices[k + 1], indices[k + 2], indices[k + 3]
            a0, a1, a2, a3 = data[k], data[k + 1], data[k + 2], data[k + 3]
            for t in range(f):
                out[r, t] = (((out[r, t] + a0 * x[j0, t]) + a1 * x[j1, t]) + a2 * x[j2, t]) \
                    + a3 * x[j3, t]
            k += 4
    for kk in range(k, end):
        prefetch_row(x, indices[min(kk + PREFETCH_DISTANCE, last)])
        j = indices[kk]
        a = data[kk]
        for t in range(f):
            out[r, t] += a * x[j, t]


@njit(**_JIT)
def csr_matmul(indptr, indices, data, x, out, chunks, accumulate):
    """out (+)= A @ x for CSR A; rows handled in ``chunks`` ranges in parallel. One non-zero
    per pass over out[r]: the faster form below ``UNROLL_MIN_F`` columns (measured)."""
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


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def matvec_rows(indptr, indices, data, x, out, lo, hi, accumulate, zero):
    """Rows lo:hi of the one-column product: each row's sum in a register (the loop of
    ``csr_matvec`` and its serial twin)."""
    for r in range(lo, hi):
        s = out[r, 0] if accumulate else zero
        for k in range(indptr[r], indptr[r + 1]):
            s += data[k] * x[indices[k], 0]
        out[r, 0] = s


@njit(**_JIT)
def csr_matvec(indptr, indices, data, x, out, chunks, accumulate, zero):
    """``csr_matmul`` for one column (f = 1): each row's sum in a register, its terms added
    in the same order from the same start (``out[r]`` or ``zero``, of the output's dtype), so
    the same bits as the other variants without a store to ``out`` per non-zero. No software
    prefetch: a cache line holds 8 rows of a one-column x, and the prefetch's own loads
    measured slower (bench/results/percall.md)."""
    for c in prange(chunks.shape[0] - 1):
        matvec_rows(indptr, indices, data, x, out, chunks[c], chunks[c + 1], accumulate, zero)


@njit(**_SERIAL)
def csr_matvec_serial(indptr, indices, data, x, out, accumulate, zero):
    """``csr_matvec``'s serial twin (same loop, same bits): no parallel launch, which costs
    more than a small product (``SERIAL_WORK``)."""
    matvec_rows(indptr, indices, data, x, out, 0, indptr.shape[0] - 1, accumulate, zero)


@njit(**_SERIAL)
def csr_matmul_serial(indptr, indices, data, x, out, accumulate, unroll):
    """The serial twin of ``csr_matmul`` (``unroll`` False) and ``csr_matmul_unrolled``
    (True): the same row loop (``row_product``), so the same bits, without the launch."""
    f = x.shape[1]
    last = indices.shape[0] - 1
    for r in range(indptr.shape[0] - 1):
        if not accumulate:
            for t in range(f):
                out[r, t] = 0
        row_product(indptr, indices, data, x, out, r, last, unroll)


@njit(**_JIT)
def csr_matmul_unrolled(indptr, indices, data, x, out, chunks, accumulate):
    """``csr_matmul`` taking four non-zeros per pass over out[r] (``row_product``), at any
    width (``LocalCSR`` times it against the others)."""
    f = x.shape[1]
    last = indices.shape[0] - 1
    for c in prange(chunks.shape[0] - 1):
        for r in range(chunks[c], chunks[c + 1]):
            if not accumulate:
                for t in range(f):
                    out[r, t] = 0
            row_product(indptr, indices, data, x, out, r, last, True)


@njit(**_JIT)
def csr_matmul_blocked(indptr2, indices, data, x, out, chunks2, accumulate):
    """out (+)= A @ x with A stored as column blocks: block b's row r holds the non-zeros
    ``indptr2[b, r]:indptr2[b, r + 1]`` of ``indices``/``data``. Blocks run one after the
    other (each in parallel over its own balanced row ``chunks2[b]``), so the rows of x a
    block gathers stay in the last-level cache while it runs."""
    f = x.shape[1]
    last = indices.shape[0] - 1
    if not accumulate:
        for r in prange(out.shape[0]):
            for t in range(f):
                out[r, t] = 0
    unroll = f >= UNROLL_MIN_F
    for b in range(indptr2.shape[0]):
        ptr = indptr2[b]
        for c in prange(chunks2.shape[1] - 1):
            for r in range(chunks2[b, c], chunks2[b, c + 1]):
                row_product(ptr, indices, data, x, out, r, last, unroll)


@njit(**_JIT)
def csr_t_matmul(indptr, indices, data, y, out, accumulate, n_par, n_rp):
    """out (+)= A^T @ y for CSR A without a transposed copy, race-free: ``n_par`` ranges of
    feature columns times ``n_rp`` ranges of output rows (columns of A, see ``row_split``);
    each task scans all of A and updates only its own output rows (n_rp = 1: the former
    column-only split, serial below 16 columns)."""
    n_rows = indptr.shape[0] - 1
    n_out = out.shape[0]
    f = y.shape[1]
    if not accumulate:
        for i in prange(n_out):
            for t in range(f):
                out[i, t] = 0
    width = (f + n_par - 1) // n_par
    span = (n_out + n_rp - 1) // n_rp
    for task in prange(n_par * n_rp):
        p = task // n_rp
        q = task - p * n_rp
        lo = p * width
        hi = min(f, lo + width)
        j_lo = q * span
        j_hi = min(n_out, j_lo + span)
        for r in range(n_rows):
            for k in range(indptr[r], indptr[r + 1]):
                j = indices[k]
                if j >= j_lo and j < j_hi:
                    a = data[k]
                    for t in range(lo, hi):
                        out[j, t] += a * y[r, t]


def gather_rows(x: np.ndarray, idx: np.ndarray, out: np.ndarray) -> None:
    """out[i] = x[idx[i]]: pack the rows a peer needs into the send buffer (serially below
    ``SERIAL_WORK`` entries, where waking the threads costs more than the copy)."""
    if idx.shape[0] * x.shape[1] < SERIAL_WORK:
        gather_rows_serial(x, idx, out)
    else:
        gather_rows_kernel(x, idx, out)


@njit(**_JIT)
def gather_rows_kernel(x, idx, out):
    """The parallel loop of ``gather_rows``."""
    f = x.shape[1]
    for i in prange(idx.shape[0]):
        s = idx[i]
        for t in range(f):
            out[i, t] = x[s, t]


@njit(**_SERIAL)
def gather_rows_serial(x, idx, out):
    """The serial twin of ``gather_rows_kernel``."""
    f = x.shape[1]
    for i in range(idx.shape[0]):
        s = idx[i]
        for t in range(f):
            out[i, t] = x[s, t]


@njit(**_JIT)
def move_rows(x, src, out, dst):
    """out[dst[i]] = x[src[i]] in one pass (rows read in place out of a shared window
    straight to where they go; ``dst`` holds no repeats)."""
    f = x.shape[1]
    for i in prange(src.shape[0]):
        s, d = src[i], dst[i]
        for t in range(f):
            out[d, t] = x[s, t]


NO_SEL = np.zeros(0, dtype=np.int64)  # ``scatter_add``'s ``sel`` left out: row i of src


def scatter_add(src: np.ndarray, idx: np.ndarray, out: np.ndarray, n_par: int,
                n_rp: int = 0, sel: np.ndarray = NO_SEL) -> None:
    """out[idx[i]] += src[i] (idx may repeat), race-free: ``n_par`` feature ranges times
    ``n_rp`` destination-row ranges (1: the former column-only split, serial below 16
    columns; 0: automatic, enough ranges to use every thread from 4 columns on; at f < 4
    each task's scan of idx costs as much as its share of the adds, measured no faster; and
    the serial twin below ``SERIAL_WORK`` entries). With ``sel``: out[idx[i]] +=
    src[sel[i]], the same adds in the same order as gathering ``src[sel]`` first, without
    the gathered copy (rows read in place out of a shared window)."""
    if n_rp <= 0:
        if idx.shape[0] * src.shape[1] < SERIAL_WORK:
            scatter_add_serial(src, idx, out, sel)
            return
        n_rp = row_split(n_par) if src.shape[1] >= 4 else 1
    scatter_add_kernel(src, idx, out, n_par, n_rp, sel)


@njit(**_SERIAL)
def scatter_add_serial(src, idx, out, sel):
    """The serial twin of ``scatter_add_kernel`` (each row's adds in the same order)."""
    f = src.shape[1]
    gathered = sel.shape[0] > 0
    for i in range(idx.shape[0]):
        d = idx[i]
        s = sel[i] if gathered else i
        for t in range(f):
            out[d, t] += src[s, t]


@njit(**_JIT)
def scatter_add_kernel(src, idx, out, n_par, n_rp, sel):
    """The scatter-add loop: task (p, q) adds feature range p of the rows bound for range q."""
    f = src.shape[1]
    n_out = out.shape[0]
    width = (f + n_par - 1) // n_par
    span = (n_out + n_rp - 1) // n_rp
    gathered = sel.shape[0] > 0
    for task in prange(n_par * n_rp):
        p = task // n_rp
        q = task - p * n_rp
        lo = p * width
        hi = min(f, lo + width)
        d_lo = q * span
        d_hi = min(n_out, d_lo + span)
        for i in range(idx.shape[0]):
            d = idx[i]
            if d >= d_lo and d < d_hi:
                s = sel[i] if gathered else i
                for t in range(lo, hi):
                    out[d, t] += src[s, t]


_EXPONENT = {4: (np.uint32, np.uint32(0x7F800000)),
             8: (np.uint64, np.uint64(0x7FF0000000000000))}


def count_nonfinite(x: np.ndarray) -> int:
    """How many entries of a float32/float64 array are NaN or Inf: one pass over the bits
    (all exponent bits set), no temporary array, SIMD integer compares; the per-call input
    check of every product (``np.isfinite(x).all()`` allocates a mask and reads it again)."""
    uint, mask = _EXPONENT[x.itemsize]
    flat = np.ascontiguousarray(x).reshape(-1).view(uint)
    return int(_count_exponent_all_ones(flat, mask))


@njit(cache=True, nogil=True, boundscheck=False)
def _count_exponent_all_ones(bits, mask):
    bad = 0
    for i in range(bits.shape[0]):
        bad += (bits[i] & mask) == mask
    return bad
