"""A block row split by columns, the way PETSc splits an MPIAIJ matrix: ``split_columns``
gives ``diag`` (the columns this block row owns, local numbering) and ``ghost`` (the other
columns holding at least one non-zero, renumbered densely 0..g-1) with ``ghost_ids`` (sorted
global ids) as the map back; ``split_block_columns`` cuts a block row at every block column
(the oblivious algorithms' stages). Sparsity awareness is exactly this: only ghost columns
are fetched."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..runtime.jit import njit
from .local_matrix import LocalCSR, index_dtype, source_dtype


def split_columns(block_row: sp.csr_array, lo: int, hi: int):
    """Split a block row (global columns) into the owned columns [lo, hi) and the rest.

    Returns ``(diag, ghost, ghost_ids)``: diag has columns shifted by -lo, ghost has the
    non-empty other columns renumbered 0..g-1 in increasing global order, ghost_ids the
    global id of each ghost column. A canonical block row (sorted, no duplicates: what the
    normalizations make) is split by two numba passes straight into the two CSRs, holding
    nothing per non-zero but their arrays; the values keep their dtype (float32 or float64).
    """
    m = sp.csr_array(block_row)
    if not m.has_canonical_format:
        return _split_columns_coo(m, lo, hi)
    indices = m.indices
    ghost_ids = ghost_columns(indices, lo, hi, m.shape[1])
    diag_ptr = np.zeros(m.shape[0] + 1, dtype=np.int64)
    ghost_ptr = np.zeros(m.shape[0] + 1, dtype=np.int64)
    _count_split(m.indptr, indices, lo, hi, diag_ptr[1:], ghost_ptr[1:])
    np.cumsum(diag_ptr, out=diag_ptr)
    np.cumsum(ghost_ptr, out=ghost_ptr)
    data = m.data.astype(source_dtype(m.data.dtype), copy=False)
    diag_idx = np.empty(int(diag_ptr[-1]), dtype=index_dtype(m.shape[0], hi - lo))
    ghost_idx = np.empty(int(ghost_ptr[-1]), dtype=index_dtype(m.shape[0], ghost_ids.size))
    diag_val = np.empty(diag_idx.size, dtype=data.dtype)
    ghost_val = np.empty(ghost_idx.size, dtype=data.dtype)
    _fill_split(m.indptr, indices, data, lo, hi, ghost_ids, diag_ptr, diag_idx, diag_val,
                ghost_ptr, ghost_idx, ghost_val)
    diag = LocalCSR.from_parts((m.shape[0], hi - lo), diag_ptr, diag_idx, diag_val)
    ghost = LocalCSR.from_parts((m.shape[0], ghost_ids.size), ghost_ptr, ghost_idx, ghost_val)
    return diag, ghost, ghost_ids


def ghost_columns(indices: np.ndarray, lo: int, hi: int, n_cols: int) -> np.ndarray:
    """The distinct column ids outside [lo, hi) among ``indices``, sorted (int64): one pass
    marking a byte per column, so no sort and no copy of the non-zeros."""
    seen = np.zeros(n_cols, dtype=np.bool_)
    _mark_outside(indices, lo, hi, seen)
    return np.flatnonzero(seen).astype(np.int64, copy=False)


@njit(cache=True, nogil=True)
def _mark_outside(indices, lo, hi, seen):
    for t in range(indices.size):
        j = indices[t]
        if j < lo or j >= hi:
            seen[j] = True


@njit(cache=True, nogil=True)
def _count_split(indptr, indices, lo, hi, diag_count, ghost_count):
    """Per row: how many non-zeros fall in [lo, hi) and how many outside."""
    for i in range(indptr.size - 1):
        d = 0
        for t in range(indptr[i], indptr[i + 1]):
            j = indices[t]
            if lo <= j < hi:
                d += 1
        diag_count[i] = d
        ghost_count[i] = indptr[i + 1] - indptr[i] - d


@njit(cache=True, nogil=True)
def _fill_split(indptr, indices, data, lo, hi, ghost_ids, diag_ptr, diag_idx, diag_val,
                ghost_ptr, ghost_idx, ghost_val):
    """Each non-zero to its block in row order: owned columns shifted by -lo, the others
    as their position in ``ghost_ids`` (a binary search; both stay sorted)."""
    for i in range(indptr.size - 1):
        d, g = diag_ptr[i], ghost_ptr[i]
        for t in range(indptr[i], indptr[i + 1]):
            j = indices[t]
            if lo <= j < hi:
                diag_idx[d] = j - lo
                diag_val[d] = data[t]
                d += 1
            else:
                ghost_idx[g] = np.searchsorted(ghost_ids, j)
                ghost_val[g] = data[t]
                g += 1


def _split_columns_coo(m: sp.csr_array, lo: int, hi: int):
    """``split_columns`` of a block row with unsorted or duplicate entries: through COO
    (duplicates summed as scipy sums them), holding int64 rows and columns per non-zero."""
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
