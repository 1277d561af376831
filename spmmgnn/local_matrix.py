"""A rank's block row, split the way PETSc splits an MPIAIJ matrix.

``diag``: the columns this block row owns, in local numbering. ``ghost``: the off-diagonal
columns that hold at least one non-zero, renumbered densely 0..g-1, with ``ghost_ids`` (sorted
global ids) as the map back. Sparsity awareness is exactly this: only ghost columns are fetched.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from . import kernels
from .threads import get_threads


class LocalCSR:
    """A CSR matrix ready for the numba kernels; values are cast once per dtype and cached.

    Derived layouts are built on first use and kept: a transposed CSR for ``t_matmul`` (a
    gather, parallel over balanced row chunks, instead of a scatter over feature ranges) and
    column blocks for ``matmul`` when the rows of x would not fit in the last-level cache.
    ``use_transpose`` / ``use_blocks`` = None chooses automatically; True / False forces.
    """

    use_transpose: bool | None = None
    use_blocks: bool | None = None

    def __init__(self, m: sp.csr_array | sp.csr_matrix):
        m = sp.csr_array(m)
        m.sum_duplicates()
        m.sort_indices()
        self.shape = m.shape
        self.nnz = int(m.nnz)
        self.indptr = m.indptr.astype(np.int64)
        idx_type = np.int32 if max(m.shape) < 2**31 - 1 else np.int64
        self.indices = m.indices.astype(idx_type)
        self._data = {np.dtype(np.float64): m.data.astype(np.float64)}
        self._chunks: dict[int, np.ndarray] = {}
        self._t: LocalCSR | None = None
        self._blocked: dict[int, _ColumnBlocks] = {}
        self._col_cum: np.ndarray | None = None

    def data(self, dtype) -> np.ndarray:
        dtype = np.dtype(dtype)
        if dtype not in self._data:
            self._data[dtype] = self._data[np.dtype(np.float64)].astype(dtype)
        return self._data[dtype]

    def chunks(self) -> np.ndarray:
        t = get_threads()
        if t not in self._chunks:
            self._chunks[t] = kernels.row_chunks(self.indptr, 4 * t)
        return self._chunks[t]

    def col_blocks(self, f: int, itemsize: int) -> int:
        """Column blocks for ``matmul`` with f columns of x: enough that each block's rows of
        x fill at most a quarter of the last-level cache (measured best of 1/2 .. 1/16), but
        no more than ``nnz / rows / BLOCK_MIN_DEGREE``: every further block costs one more
        pass over ``out``, which short rows cannot pay for. 1 means unblocked."""
        if self.use_blocks is False or self.shape[0] == 0:
            return 1
        n = min(-(-self.shape[1] * f * itemsize // max(1, kernels.LLC_BYTES // 4)),
                self.shape[1])
        if self.use_blocks is None:
            n = min(n, self.nnz // (BLOCK_MIN_DEGREE * self.shape[0]))
            hot = kernels.LLC_BYTES // 4 // max(1, f * itemsize)  # x rows a quarter LLC holds
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

    def matmul(self, x: np.ndarray, out: np.ndarray, accumulate: bool) -> None:
        """out (+)= self @ x."""
        n_blocks = self.col_blocks(x.shape[1], x.dtype.itemsize)
        if n_blocks > 1:
            blocks = self._blocked.get(n_blocks)
            if blocks is None:
                blocks = self._blocked[n_blocks] = _ColumnBlocks(self, n_blocks)
            kernels.csr_matmul_blocked(blocks.indptr2, blocks.indices, blocks.data(x.dtype), x,
                                       out, blocks.chunks(), accumulate)
            return
        kernel = (kernels.csr_matmul_unrolled if x.shape[1] >= kernels.UNROLL_MIN_F
                  else kernels.csr_matmul)
        kernel(self.indptr, self.indices, self.data(x.dtype), x, out, self.chunks(), accumulate)

    def transpose(self) -> LocalCSR:
        """The transposed CSR (built once, kept)."""
        if self._t is None:
            self._t = LocalCSR(self.to_scipy().T.tocsr())
        return self._t

    def t_matmul(self, y: np.ndarray, out: np.ndarray, accumulate: bool) -> None:
        """out (+)= self.T @ y: with the transposed CSR by default (faster at every measured
        width and thread count), else scanning A over feature x output-row ranges."""
        if self.use_transpose is not False:
            self.transpose().matmul(y, out, accumulate)
            return
        n_par = kernels.column_split(y.shape[1])
        kernels.csr_t_matmul(self.indptr, self.indices, self.data(y.dtype), y, out, accumulate,
                             n_par, kernels.row_split(n_par))

    def to_scipy(self) -> sp.csr_array:
        return sp.csr_array((self._data[np.dtype(np.float64)], self.indices, self.indptr),
                            shape=self.shape)


BLOCK_MIN_DEGREE = 2  # average non-zeros per row and column block that blocking needs
HOT_SHARE_MAX = 0.5  # unblocked when the columns a quarter LLC holds carry this share of nnz


class _ColumnBlocks:
    """A CSR regrouped by column blocks: block b holds columns [b*w, (b+1)*w) of every row,
    stored one block after the other (``indptr2[b]`` its row pointers into the shared
    ``indices``), so ``csr_matmul_blocked`` gathers from one cache-sized slice of x at a time."""

    def __init__(self, m: LocalCSR, n_blocks: int):
        n_rows, n_cols = m.shape
        width = -(-n_cols // n_blocks)
        rows = np.repeat(np.arange(n_rows, dtype=np.int64), np.diff(m.indptr))
        block = m.indices.astype(np.int64) // max(1, width)
        self.perm = np.argsort(block * n_rows + rows, kind="stable")
        self.indices = m.indices[self.perm]
        counts = np.bincount(block * n_rows + rows, minlength=n_blocks * n_rows)
        self.indptr2 = np.zeros((n_blocks, n_rows + 1), dtype=np.int64)
        self.indptr2[:, 1:] = np.cumsum(counts).reshape(n_blocks, n_rows)
        self.indptr2[1:, 0] = self.indptr2[:-1, -1]
        self._m = m
        self._data: dict[np.dtype, np.ndarray] = {}
        self._chunks: dict[int, np.ndarray] = {}

    def data(self, dtype) -> np.ndarray:
        dtype = np.dtype(dtype)
        if dtype not in self._data:
            self._data[dtype] = self._m.data(dtype)[self.perm]
        return self._data[dtype]

    def chunks(self) -> np.ndarray:
        t = get_threads()
        if t not in self._chunks:
            self._chunks[t] = np.stack([kernels.row_chunks(p - p[0], 4 * t)
                                        for p in self.indptr2])
        return self._chunks[t]


def split_columns(block_row: sp.csr_array, lo: int, hi: int):
    """Split a block row (global columns) into the owned columns [lo, hi) and the rest.

    Returns ``(diag, ghost, ghost_ids)``: diag has columns shifted by -lo, ghost has the
    non-empty other columns renumbered 0..g-1 in increasing global order, ghost_ids the
    global id of each ghost column.
    """
    m = sp.csr_array(block_row)
    rows = np.repeat(np.arange(m.shape[0], dtype=np.int64), np.diff(m.indptr))
    cols = m.indices.astype(np.int64)
    own = (cols >= lo) & (cols < hi)
    diag = sp.csr_array((m.data[own], (rows[own], cols[own] - lo)), shape=(m.shape[0], hi - lo))
    ghost_ids, ghost_cols = np.unique(cols[~own], return_inverse=True)
    ghost = sp.csr_array((m.data[~own], (rows[~own], ghost_cols.reshape(-1))),
                         shape=(m.shape[0], ghost_ids.size))
    return LocalCSR(diag), LocalCSR(ghost), ghost_ids.astype(np.int64)


def split_block_columns(block_row: sp.csr_array, offsets: np.ndarray) -> list[LocalCSR]:
    """Split a block row into its block columns A_ij (local column numbering in each)."""
    m = sp.csr_array(block_row)
    return [LocalCSR(m[:, int(offsets[q]):int(offsets[q + 1])])
            for q in range(offsets.size - 1)]
