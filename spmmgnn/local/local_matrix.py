"""A local sparse block ready for the numba kernels (``LocalCSR``: values cast once per
dtype, its transpose, its column blocks) and the choice of the kernel that multiplies it.
``local.split`` cuts a block row into such blocks."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..runtime.jit import njit, numba_pool
from ..runtime.threads import get_threads
from . import kernels
from .column_blocks import ColumnBlocks, unsigned
from .kernel_choice import (
    BLOCK_MIN_DEGREE,
    HOT_SHARE_MAX,
    MATMUL_SETTINGS,
    MEASURE_MIN_WORK,
    SAMPLE_WINDOWS,
    SAMPLE_WORK,
    SERIAL_TWINS,
    TRANSPOSE_SETTINGS,
    Choice,
    kernel_setting,
    time_candidates,
)


class LocalCSR:
    """A CSR matrix ready for the numba kernels; values are cast once per dtype and cached.

    Every variant of a product adds each row's terms in the same order (column order, one
    rounding per term), so they give bitwise the same numbers and the choice is only about
    speed. ``matmul`` runs one of: ``plain`` (one non-zero per pass over the output row),
    ``unrolled`` (four per pass), ``vector`` (one column: the row's sum in a register),
    ``blocked:N`` (column blocks whose rows of x fit in the last-level cache, DistGNN §4).
    ``t_matmul`` runs ``transpose`` (the transposed CSR, built once, itself a ``LocalCSR``
    that chooses) or ``scan`` (A scanned over feature x output-row ranges, no copy).

    ``kernel`` / ``kernel_t`` select (default ``$SPMMGNN_KERNEL`` / ``$SPMMGNN_KERNEL_T``, else
    ``auto``): ``auto`` times the candidates on the first call at each (width, dtype,
    threads), on the real operands, and keeps the fastest (inspector-executor); ``rule``
    picks by the cache model (``col_blocks``) without timing; any variant name forces it
    (``blocked`` = the cache model's block count). ``choices`` records what ran and why.
    """

    kernel: str | None = None
    kernel_t: str | None = None
    keeps_order = False  # a ``renamed`` matrix: its columns are not in increasing order
    sample_rows: np.ndarray | None = None  # set on a row sample: its rows in the matrix

    def __init__(self, m: sp.csr_array | sp.csr_matrix):
        m = sp.csr_array(m)
        m.sum_duplicates()
        m.sort_indices()
        self._set(m.shape, m.indptr.astype(np.int64), m.indices.astype(index_dtype(*m.shape)),
                  m.data.astype(source_dtype(m.data.dtype)))

    @classmethod
    def from_parts(cls, shape: tuple[int, int], indptr: np.ndarray, indices: np.ndarray,
                   data: np.ndarray) -> LocalCSR:
        """A LocalCSR that takes ownership of arrays already in canonical form (each row's
        columns sorted and distinct; int64 ``indptr``, int32 ``indices`` below 2^31 - 1
        columns, float32/float64 ``data``): no copy, no check (``split_columns`` builds
        them so; ``__init__`` would copy each once more)."""
        self = cls.__new__(cls)
        self._set(tuple(int(s) for s in shape), indptr, indices, data)
        return self

    def _set(self, shape: tuple[int, int], indptr: np.ndarray, indices: np.ndarray,
             data: np.ndarray) -> None:
        self.shape = shape
        self.nnz = int(indices.size)
        self.work = self.nnz + self.shape[0]  # entries one column of a product touches
        self.indptr = indptr
        self.indices = indices
        self.gather_indices = unsigned(self.indices)
        # the values as given (float32 or float64): the source every other dtype is cast
        # from, so a float32 matrix never holds a float64 copy
        self._source = data.dtype
        self._data = {data.dtype: data}
        self._chunks: dict[int, np.ndarray] = {}
        self._twins: list[LocalCSR] = []  # ``renamed`` copies sharing the values
        self._t: LocalCSR | None = None
        self._blocked: dict[int, ColumnBlocks] = {}
        self._col_cum: np.ndarray | None = None
        self.choices: dict[tuple, Choice] = {}

    def renamed(self, new_col: np.ndarray, n_cols: int) -> LocalCSR:
        """This matrix with column j renamed ``new_col[j]`` (of ``n_cols``), each row's terms
        kept in this matrix's order, not re-sorted: its products are this one's bit for bit
        (so never column-blocked, which would regroup them). Shares the row pointers and
        the values (``keep_values`` on this matrix applies to it too)."""
        out = LocalCSR.__new__(LocalCSR)
        out.__dict__.update(self.__dict__)
        out.shape = (self.shape[0], int(n_cols))
        out.indices = new_col[self.indices].astype(index_dtype(*out.shape))
        out.gather_indices = unsigned(out.indices)
        out.keeps_order = True
        out._t, out._blocked, out._col_cum, out.choices, out._twins = None, {}, None, {}, []
        self._twins.append(out)
        return out

    def data(self, dtype) -> np.ndarray:
        found = self._data.get(dtype)  # the fast path: a numpy dtype already cached
        if found is None:
            dtype = np.dtype(dtype)
            if dtype not in self._data:
                self._data[dtype] = self._data[self._source].astype(dtype)
            found = self._data[dtype]
        return found

    def keep_values(self, dtype) -> None:
        """Keep the values in ``dtype`` only (cast once more if not yet cached) and free the
        other copies, in the transposed CSR and the column blocks too: a float32 training
        run needs no float64 values after the symmetry probe (8 bytes per non-zero). A
        later call in another dtype casts from these values (exact when widening)."""
        dtype = np.dtype(dtype)
        kept = self.data(dtype)
        self._data.clear()  # in place: the ``renamed`` twins share this dict
        self._data[dtype] = kept
        for m in (self, *self._twins):
            m._source = dtype
        for b in self._blocked.values():
            b.keep_values(dtype)
        if self._t is not None:
            self._t.keep_values(dtype)

    def chunks(self, threads: int | None = None) -> np.ndarray:
        """Row ranges of near-equal work, four per thread (``threads``: the current count,
        when the caller already read it)."""
        t = get_threads() if threads is None else threads
        found = self._chunks.get(t)
        if found is None:
            found = self._chunks[t] = kernels.row_chunks(self.indptr, 4 * t)
        return found

    def llc_blocks(self, f: int, itemsize: int) -> int:
        """Column blocks whose rows of x (f columns) fill at most a quarter of the
        last-level cache each (at least 1, at most one per column)."""
        quarter = max(1, kernels.llc() // 4)
        return max(1, min(-(-self.shape[1] * f * itemsize // quarter), self.shape[1]))

    def col_blocks(self, f: int, itemsize: int) -> int:
        """The cache model's choice (``rule``): ``llc_blocks``, but no more than
        ``nnz / rows / BLOCK_MIN_DEGREE`` (every further block costs one more pass over
        ``out``, which short rows cannot pay for) and none when the columns a quarter LLC
        holds carry ``HOT_SHARE_MAX`` of the non-zeros. 1 means unblocked. It regressed a
        banded matrix, which is why ``auto`` measures instead."""
        if self.shape[0] == 0:
            return 1
        n = min(self.llc_blocks(f, itemsize), self.nnz // (BLOCK_MIN_DEGREE * self.shape[0]))
        hot = kernels.llc() // 4 // max(1, f * itemsize)  # x rows a quarter LLC holds
        if n > 1 and self.hot_share(hot) >= HOT_SHARE_MAX:
            return 1
        return max(1, int(n))

    def hot_share(self, k: int) -> float:
        """Share of the non-zeros in the k most populated columns: high on power-law graphs,
        whose hot rows of x stay cached without blocking (there blocking measured slower)."""
        if self._col_cum is None:
            counts = np.bincount(self.indices, minlength=self.shape[1])
            self._col_cum = np.concatenate([[0], np.cumsum(np.sort(counts)[::-1])])
        if self.nnz == 0:
            return 1.0
        return float(self._col_cum[min(k, self.shape[1])] / self.nnz)

    # ------------------------------------------------------------------ A @ x
    def candidates(self, f: int, itemsize: int) -> list[str]:
        """The ``matmul`` variants ``auto`` times at width f: plain, unrolled, and column
        blocks at the cache model's count and half of it when x does not fit in a quarter of
        the last-level cache."""
        out = ["vector", "plain", "unrolled"] if f == 1 else ["plain", "unrolled"]
        if self.keeps_order:
            return out
        n = min(self.llc_blocks(f, itemsize), self.nnz // max(1, self.shape[0]))
        out += [f"blocked:{b}" for b in sorted({max(2, n // 2), n}) if n >= 2]
        return out

    def _rule(self, f: int, itemsize: int) -> str:
        n = 1 if self.keeps_order else self.col_blocks(f, itemsize)
        if n > 1:
            return f"blocked:{n}"
        # unrolled was at least as fast as plain in all 15 cases of bench/kernel_choice.py;
        # at f = 1 the sum in a register beat both (bench/results/percall.md)
        return "vector" if f == 1 else "unrolled"

    def _forced(self, setting: str, f: int, itemsize: int) -> str:
        if setting == "blocked" and self.keeps_order:
            return "unrolled"
        if setting == "blocked":
            return f"blocked:{max(2, self.llc_blocks(f, itemsize))}"
        if setting == "vector" and f != 1:
            return "plain"  # the one-column kernel at another width: its general form
        return setting

    def _blocks(self, n_blocks: int) -> ColumnBlocks:
        """The matrix regrouped into ``n_blocks`` column blocks (built once, kept)."""
        if n_blocks not in self._blocked:
            self._blocked[n_blocks] = ColumnBlocks(self, n_blocks)
        return self._blocked[n_blocks]

    def _run(self, variant: str, x: np.ndarray, out: np.ndarray, accumulate: bool,
             threads: int | None = None) -> None:
        if variant.startswith("blocked:"):
            blocks = self._blocks(int(variant[8:]))
            kernels.csr_matmul_blocked(blocks.indptr2, blocks.gather_indices,
                                       blocks.data(x.dtype), x, out, blocks.chunks(), accumulate)
            return
        data = self.data(x.dtype)
        if variant == "vector":
            kernels.csr_matvec(self.indptr, self.gather_indices, data, x, out,
                               self.chunks(threads), accumulate, data.dtype.type(0))
            return
        kernel = kernels.csr_matmul_unrolled if variant == "unrolled" else kernels.csr_matmul
        kernel(self.indptr, self.gather_indices, data, x, out, self.chunks(threads), accumulate)

    def _choose(self, x: np.ndarray, threads: int | None = None) -> str:
        f, itemsize = x.shape[1], x.dtype.itemsize
        key = (f, x.dtype.str, get_threads() if threads is None else threads)
        choice = self.choices.get(key)
        if choice is None:
            setting = kernel_setting(self.kernel, "SPMMGNN_KERNEL", MATMUL_SETTINGS)
            if setting == "auto" and self.nnz * f >= MEASURE_MIN_WORK:
                # timed on the whole matrix: a row sample touches each row of x fewer
                # times than the matrix does, so it underrates column blocking (measured:
                # uniform, f = 256, the sample chose unrolled at 1.3x blocked:8's time)
                cands = self.candidates(f, itemsize)
                self._prepare(cands, x.dtype)
                seconds = time_candidates(
                    cands, lambda v, scratch: self._run(v, x, scratch, False),
                    (self.shape[0], f), x.dtype)
                choice = Choice(min(seconds, key=seconds.get), "measured", seconds)
                self._keep_blocks(choice.variant)
            elif setting in ("auto", "rule"):
                choice = Choice(self._rule(f, itemsize), "rule")
            else:
                choice = Choice(self._forced(setting, f, itemsize), "forced")
            self.choices[key] = choice
        return choice.variant

    def row_sample(self, f: int) -> LocalCSR:
        """What the transpose choice times at width f: the matrix itself, or when one call is
        more than ``2 * SAMPLE_WORK`` (non-zeros x columns) a copy of ``SAMPLE_WINDOWS``
        evenly spaced runs of whole rows holding about ``SAMPLE_WORK / f`` non-zeros, with all
        the columns. Used for ``transpose`` vs ``scan``, which differ 5-10x (the ranking
        survives sampling); not for the ``matmul`` variants, whose differences come from
        reuse of x in cache, which a sample with fewer rows per column understates."""
        if self.nnz * f <= 2 * SAMPLE_WORK or self.shape[0] < 2 * SAMPLE_WINDOWS:
            return self
        per_window = SAMPLE_WORK // f // SAMPLE_WINDOWS
        spacing = np.arange(SAMPLE_WINDOWS) * (self.nnz // SAMPLE_WINDOWS)
        starts = np.searchsorted(self.indptr, spacing, side="right") - 1
        stops = np.searchsorted(self.indptr, self.indptr[starts] + per_window, side="left")
        stops = np.minimum(np.maximum(stops, starts + 1), np.r_[starts[1:], self.shape[0]])
        rows = np.unique(np.concatenate([np.arange(a, b) for a, b in zip(starts, stops,
                                                                          strict=True)]))
        sample = LocalCSR(self.to_scipy()[rows])
        sample.kernel, sample.kernel_t, sample.sample_rows = "auto", "auto", rows
        return sample

    def _prepare(self, variants: list[str], dtype) -> None:
        """Build what each variant reads (values in this dtype, column blocks, row chunks)
        before it is timed: set-up is paid once and must not decide the choice."""
        self.data(dtype)
        self.chunks()
        for v in variants:
            if v.startswith("blocked:"):
                blocks = self._blocks(int(v[8:]))
                blocks.data(dtype)
                blocks.chunks()

    def _keep_blocks(self, chosen: str) -> None:
        """Free the column-block copies that timing built and no choice uses (each is a
        copy of the matrix)."""
        used = {c.variant for c in self.choices.values()} | {chosen}
        for n in list(self._blocked):
            if f"blocked:{n}" not in used:
                del self._blocked[n]

    def matmul(self, x: np.ndarray, out: np.ndarray, accumulate: bool) -> None:
        """out (+)= self @ x; a small product (``kernels.SERIAL_WORK``), or one in a call
        limited to one thread, runs the variant's serial twin (the same bits)."""
        threads = get_threads()  # read once: ~1 us a read, a cost on every small product
        variant = self._choose(x, threads)
        if (self.work * x.shape[1] < kernels.SERIAL_WORK or numba_pool()[0]() == 1) \
                and variant in SERIAL_TWINS:
            data = self.data(x.dtype)
            if variant == "vector":
                kernels.csr_matvec_serial(self.indptr, self.gather_indices, data, x, out,
                                          accumulate, data.dtype.type(0))
            else:
                kernels.csr_matmul_serial(self.indptr, self.gather_indices, data, x, out,
                                          accumulate, variant == "unrolled")
            return
        self._run(variant, x, out, accumulate, threads)

    # ------------------------------------------------------------------ A^T @ y
    def transpose(self) -> LocalCSR:
        """The transposed CSR (built once, kept)."""
        if self._t is None:
            rows, cols = self.shape
            indptr = np.zeros(cols + 1, dtype=np.int64)
            indices = np.empty(self.nnz, dtype=index_dtype(cols, rows))
            data = self._data[self._source]
            values = np.empty_like(data)
            _transpose_into(self.indptr, self.indices, data, indptr, indices, values)
            self._t = LocalCSR.from_parts((cols, rows), indptr, indices, values)
            self._t.kernel = self.kernel
        return self._t

    def drop_transpose(self) -> None:
        """Free the transposed CSR and forget the ``t_matmul`` choices (a later call
        chooses and builds again): a copy of the matrix nobody will use."""
        self._t = None
        self.choices = {k: c for k, c in self.choices.items() if k[0] != "t"}

    @property
    def transposed(self) -> LocalCSR | None:
        """The transposed CSR if ``t_matmul`` built and kept one, else None."""
        return self._t

    def _run_t(self, variant: str, y: np.ndarray, out: np.ndarray, accumulate: bool) -> None:
        if variant == "transpose":
            self.transpose().matmul(y, out, accumulate)
            return
        n_par = kernels.column_split(y.shape[1])
        kernels.csr_t_matmul(self.indptr, self.indices, self.data(y.dtype), y, out, accumulate,
                             n_par, kernels.row_split(n_par))

    def _choose_t(self, y: np.ndarray) -> str:
        f = y.shape[1]
        key = ("t", f, y.dtype.str, get_threads())
        choice = self.choices.get(key)
        if choice is None:
            setting = kernel_setting(self.kernel_t, "SPMMGNN_KERNEL_T", TRANSPOSE_SETTINGS)
            if setting == "auto" and self.nnz * f >= MEASURE_MIN_WORK:
                choice = self._measure_t(y)
            elif setting in ("auto", "rule"):
                choice = Choice("transpose", "rule")
            else:
                choice = Choice(setting, "forced")
            self.choices[key] = choice
            if not any(c.variant == "transpose" for k, c in self.choices.items()
                       if k[0] == "t"):
                self._t = None  # scan won everywhere: no transposed copy to keep
        return choice.variant

    def _measure_t(self, y: np.ndarray) -> Choice:
        """Time ``transpose`` (a row sample of the transposed CSR: a column sample of this
        matrix, after that CSR has chosen its own kernel) against ``scan`` (a row sample of
        this matrix), each scaled to the whole matrix by its share of the non-zeros."""
        f = y.shape[1]
        t = self.transpose()
        t.matmul(y, np.empty((t.shape[0], f), dtype=y.dtype), False)  # it chooses first
        t_probe, probe = t.row_sample(f), self.row_sample(f)
        t_variant = t.choices[(f, y.dtype.str, get_threads())].variant
        t_probe._prepare([t_variant], y.dtype)
        probe.data(y.dtype)
        scratch = {"transpose": np.empty((t_probe.shape[0], f), dtype=y.dtype),
                   "scan": np.empty((self.shape[1], f), dtype=y.dtype)}
        y_rows = y if probe is self else y[probe.sample_rows]

        def run(v, _):
            if v == "transpose":
                t_probe._run(t_variant, y, scratch[v], False)
            else:
                probe._run_t("scan", y_rows, scratch[v], False)

        seconds = time_candidates(["transpose", "scan"], run, (0, f), y.dtype)
        shares = {"transpose": t_probe.nnz / max(1, t.nnz), "scan": probe.nnz / max(1, self.nnz)}
        seconds = {v: s / shares[v] for v, s in seconds.items()}
        return Choice(min(seconds, key=seconds.get), "measured", seconds,
                      min(shares.values()))

    def t_matmul(self, y: np.ndarray, out: np.ndarray, accumulate: bool) -> None:
        """out (+)= self.T @ y."""
        self._run_t(self._choose_t(y), y, out, accumulate)

    def kernel_report(self) -> list[dict]:
        """One dict per (direction, width, dtype, threads) this matrix ran: the variant,
        how it was chosen and the seconds of each candidate when measured."""
        rows = []
        for key, c in self.choices.items():
            t = key[0] == "t"
            f, dtype, threads = key[1:] if t else key
            rows.append(dict(op="A^T x" if t else "A x", f=f, dtype=np.dtype(dtype).name,
                             threads=threads, variant=c.variant, source=c.source,
                             seconds=c.seconds, sample=c.sample))
        return rows

    def to_scipy(self) -> sp.csr_array:
        return sp.csr_array((self._data[self._source], self.indices, self.indptr),
                            shape=self.shape)


@njit(cache=True, nogil=True)
def _transpose_into(indptr, indices, data, t_indptr, t_indices, t_values):
    """The transposed CSR (scipy's ``csr_tocsc``: each column's rows in increasing order,
    so canonical) into the given arrays, ``t_indptr`` zeroed, of one more than the
    columns."""
    for t in range(indices.size):
        t_indptr[indices[t] + 1] += 1
    for j in range(t_indptr.size - 1):
        t_indptr[j + 1] += t_indptr[j]
    for i in range(indptr.size - 1):
        for t in range(indptr[i], indptr[i + 1]):
            j = indices[t]
            p = t_indptr[j]
            t_indices[p] = i
            t_values[p] = data[t]
            t_indptr[j] = p + 1
    for j in range(t_indptr.size - 1, 0, -1):  # each start moved to the next: shift back
        t_indptr[j] = t_indptr[j - 1]
    t_indptr[0] = 0


def source_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype a matrix's values are kept in: float32 and float64 as given, anything else
    as float64 (every cast is then exact or the one the training dtype makes anyway)."""
    return dtype if dtype in (np.dtype(np.float32), np.dtype(np.float64)) else np.dtype(
        np.float64)


def index_dtype(rows: int, cols: int) -> type:
    """LocalCSR's column index type for a rows x cols block (as ``__init__`` picks it)."""
    return np.int32 if max(rows, cols) < 2**31 - 1 else np.int64
