"""Column blocks of a CSR block (a ``LocalCSR``; DistGNN section 4): the non-zeros of each
row regrouped by column block, so the product gathers from one cache-sized slice of x at a
time; and the unsigned view of column indices the gather kernels read."""

from __future__ import annotations

import numpy as np

from ..runtime.jit import njit
from ..runtime.threads import get_threads
from . import kernels


class ColumnBlocks:
    """A CSR regrouped by column blocks: block b holds columns [b*w, (b+1)*w) of every row,
    stored one block after the other (``indptr2[b]`` its row pointers into the shared
    ``indices``), so ``csr_matmul_blocked`` gathers from one cache-sized slice of x at a time."""

    def __init__(self, m, n_blocks: int):
        n_rows, n_cols = m.shape
        width = max(1, -(-n_cols // n_blocks))
        # a stable counting sort of the non-zeros by (column block, row): the order of a
        # stable argsort of block * n_rows + row, without its int64 keys per non-zero
        self.indptr2 = np.zeros((n_blocks, n_rows + 1), dtype=np.int64)
        _count_blocks(m.indptr, m.indices, width, self.indptr2)
        self.perm = np.empty(m.nnz, dtype=np.int64)
        _place_blocks(m.indptr, m.indices, width, self.indptr2[:, :-1].copy(), self.perm)
        self.indices = m.indices[self.perm]
        self.gather_indices = unsigned(self.indices)
        self._m = m
        self._data: dict[np.dtype, np.ndarray] = {}
        self._chunks: dict[int, np.ndarray] = {}

    def data(self, dtype) -> np.ndarray:
        dtype = np.dtype(dtype)
        if dtype not in self._data:
            self._data[dtype] = self._m.data(dtype)[self.perm]
        return self._data[dtype]

    def keep_values(self, dtype) -> None:
        """Free the values in every dtype but ``dtype`` (see ``LocalCSR.keep_values``)."""
        self._data = {k: v for k, v in self._data.items() if k == np.dtype(dtype)}

    def chunks(self) -> np.ndarray:
        t = get_threads()
        if t not in self._chunks:
            self._chunks[t] = np.stack([kernels.row_chunks(p - p[0], 4 * t)
                                        for p in self.indptr2])
        return self._chunks[t]


@njit(cache=True, nogil=True)
def _count_blocks(indptr, indices, width, indptr2):
    """Row pointers per column block: the non-zeros of row i in block b counted at
    indptr2[b, i + 1], then summed in (block, row) order."""
    for i in range(indptr.size - 1):
        for t in range(indptr[i], indptr[i + 1]):
            indptr2[indices[t] // width, i + 1] += 1
    total = 0  # then the running sum over (block, row): block b starts where b - 1 ends
    for b in range(indptr2.shape[0]):
        indptr2[b, 0] = total
        for i in range(1, indptr2.shape[1]):
            total += indptr2[b, i]
            indptr2[b, i] = total


@njit(cache=True, nogil=True)
def _place_blocks(indptr, indices, width, next_slot, perm):
    """perm[p] = t for each non-zero t at its slot p of (column block, row), taken in row
    order, each row's non-zeros in order (``next_slot``: each row's first slot per block)."""
    for i in range(indptr.size - 1):
        for t in range(indptr[i], indptr[i + 1]):
            b = indices[t] // width
            perm[next_slot[b, i]] = t
            next_slot[b, i] += 1


def unsigned(indices: np.ndarray) -> np.ndarray:
    """The column indices as an unsigned view (no copy) for the gather kernels: numba wraps
    a negative signed index around, a test and an add on every non-zero that an unsigned one
    skips (measured 1.2-1.4x on the one-column product, bench/results/percall.md)."""
    return indices.view(np.uint32 if indices.dtype == np.int32 else np.uint64)
