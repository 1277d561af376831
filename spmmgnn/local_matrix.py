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
    """A CSR matrix ready for the numba kernels; values are cast once per dtype and cached."""

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

    def matmul(self, x: np.ndarray, out: np.ndarray, accumulate: bool) -> None:
        """out (+)= self @ x."""
        kernels.csr_matmul(self.indptr, self.indices, self.data(x.dtype), x, out,
                           self.chunks(), accumulate)

    def t_matmul(self, y: np.ndarray, out: np.ndarray, accumulate: bool) -> None:
        """out (+)= self.T @ y, without forming the transpose."""
        kernels.csr_t_matmul(self.indptr, self.indices, self.data(y.dtype), y, out, accumulate,
                             kernels.column_split(y.shape[1]))

    def to_scipy(self) -> sp.csr_array:
        return sp.csr_array((self._data[np.dtype(np.float64)], self.indices, self.indptr),
                            shape=self.shape)


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
