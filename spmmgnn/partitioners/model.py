"""The partitioning model shared by every partitioner: column-net hypergraph, loads, load cap.

For the matrix ``A`` the SpMM applies and a part vector on its rows, the communication of
column c is the net {c} U {r : A[r, c] != 0} (the owner vertex c is a pin of its own net), so
the connectivity-1 cost of this *column-net* hypergraph equals the total volume of docs/metrics.md
exactly, for any A (directed, non-symmetric, with or without a diagonal).

With ``pattern(A)`` the 0/1 pattern of A (duplicates merged, explicit zeros kept), vertex
v "is in" the nets of the columns of row v of ``B = pattern(A) + I``; net c "holds" the
rows of column c of B. The compute load of a vertex is the non-zeros of its row of A.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..runtime.errors import SpmmgnnError
from ..runtime.jit import njit


def as_square_csr(A) -> sp.csr_array:
    """A as a square CSR array (accepts a Graph, any scipy sparse matrix or a dense array)."""
    A = getattr(A, "adj", A)
    try:
        A = sp.csr_array(A)
    except (TypeError, ValueError) as exc:
        raise SpmmgnnError(f"cannot use {type(A).__name__} as a sparse matrix: {exc}") from None
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise SpmmgnnError(f"the matrix must be square, got shape {A.shape}")
    return A


def row_loads(A: sp.csr_array, row_weight: int = 0) -> np.ndarray:
    """The weight a partitioner balances per vertex: the stored non-zeros of its row (the
    compute load of docs/metrics.md), plus ``row_weight`` for the work each row costs
    whatever its non-zeros (a training step's dense part: ``partition(row_weight=)``)."""
    return np.diff(A.indptr).astype(np.int64) + int(row_weight)


def load_cap(loads: np.ndarray, k: int, epsilon: float) -> int:
    """Largest part load allowed: floor((1 + eps) * W / k), or the heaviest vertex if larger
    (a vertex cannot be split, so then nothing better exists). An epsilon of k - 1 or more
    allows one part the whole load: the cap is then W (also for a huge epsilon, whose
    product would overflow)."""
    if loads.size == 0:
        return 0
    total = int(loads.sum())
    bound = (1.0 + float(epsilon)) * total / k
    cap = total if not bound < total else int(np.floor(bound + 1e-9))
    return max(cap, int(loads.max()))


@dataclass
class ColumnNet:
    """A hypergraph whose nets have owner vertices, in CSR both ways.

    ``vptr/vnets``: nets of vertex v = ``vnets[vptr[v]:vptr[v+1]]``;
    ``nptr/npins``: pins of net c = ``npins[nptr[c]:nptr[c+1]]``;
    ``owner[c]``: the vertex whose part sends net c (a pin of c); ``optr/onets``: the nets
    vertex v owns. From a matrix (``from_matrix``) net c is column c, owned by vertex c (the
    refinement kernels also accept a vertex owning several nets).
    """

    n: int
    vptr: np.ndarray
    vnets: np.ndarray
    nptr: np.ndarray
    npins: np.ndarray
    owner: np.ndarray
    optr: np.ndarray
    onets: np.ndarray

    @property
    def m(self) -> int:
        return int(self.nptr.size - 1)

    @classmethod
    def from_matrix(cls, A: sp.csr_array) -> ColumnNet:
        """The column-net hypergraph of A: the rows of ``B = pattern(A) + I`` (sorted, one
        entry per column) and their transpose, built by numba passes straight into int64
        arrays (scipy's sum, CSC copy and casts held the pattern several times over)."""
        n = A.shape[0]
        vptr, vnets = _merged_rows(A, transpose=False, diagonal=True, dtype=np.int64)
        nptr = np.zeros(n + 1, dtype=np.int64)
        npins = np.empty(vnets.size, dtype=np.int64)
        _transpose(vptr, vnets, nptr, npins)
        ids = np.arange(n, dtype=np.int64)
        return cls(n=n, vptr=vptr, vnets=vnets, nptr=nptr, npins=npins,
                   owner=ids, optr=np.arange(n + 1, dtype=np.int64), onets=ids)

    def net_sizes(self) -> np.ndarray:
        return np.diff(self.nptr)


def symmetric_graph(A: sp.csr_array) -> sp.csr_array:
    """Pattern of A + A^T without the diagonal: the undirected graph the graph partitioners
    see (a non-symmetric A is symmetrized, so their objective only approximates the volume).

    Built from A's index arrays in three numba passes (count, fill, sort and merge each row)
    into one int32 neighbour array of at most 2 nnz entries, then compacted: scipy's
    ``P + P.T`` held the pattern, its transpose and a sum of 2 nnz with int64 indices (at
    2.3 x 10^8 non-zeros about 16 GB; this takes about 3 GB)."""
    n = A.shape[0]
    if n >= 2**31 - 1 or A.nnz >= 2**31 - 1:
        raise SpmmgnnError(f"the partitioners' graph here holds < 2^31 vertices and "
                           f"non-zeros, got n={n:,}, nnz={A.nnz:,}")
    ptr, indices = _merged_rows(A, transpose=True, diagonal=False, dtype=np.int32)
    if ptr[-1] < 2**31 - 1:  # int32 pointers too, or scipy widens the indices to int64
        ptr = ptr.astype(np.int32)
    return sp.csr_array((np.ones(indices.size, dtype=np.int8), indices, ptr), shape=(n, n))


def _merged_rows(A: sp.csr_array, transpose: bool, diagonal: bool,
                 dtype) -> tuple[np.ndarray, np.ndarray]:
    """(indptr int64, indices of ``dtype``) of the pattern of A (+ A^T with ``transpose``)
    with each row sorted, one entry per column, and the diagonal in every row
    (``diagonal``) or in none: count, fill, sort and merge each row in place, compact."""
    n = A.shape[0]
    ptr = np.zeros(n + 1, dtype=np.int64)
    _count_rows(A.indptr, A.indices, ptr, transpose, diagonal)
    np.cumsum(ptr, out=ptr)
    buf = np.empty(int(ptr[-1]), dtype=dtype)
    _fill_rows(A.indptr, A.indices, ptr, buf, transpose, diagonal)
    keep = _merge_rows(ptr, buf, diagonal)
    out_ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(keep, out=out_ptr[1:])
    _compact_rows(ptr, buf, keep, out_ptr)  # in place: row r moves down to out_ptr[r]
    nnz = int(out_ptr[-1])
    indices = buf[:nnz].copy() if nnz < buf.size else buf
    return out_ptr, indices


@njit(cache=True)
def _count_rows(indptr, indices, counts, transpose, diagonal):
    """counts[r + 1] = the entries row r gets: its row of A, with ``transpose`` its column
    too, with ``diagonal`` one more (duplicates still in)."""
    for r in range(indptr.size - 1):
        counts[r + 1] += indptr[r + 1] - indptr[r] + (1 if diagonal else 0)
        if transpose:
            for j in range(indptr[r], indptr[r + 1]):
                counts[indices[j] + 1] += 1


@njit(cache=True)
def _fill_rows(indptr, indices, ptr, out, transpose, diagonal):
    """Row r of A (and column r, the diagonal) into out[ptr[r]:ptr[r + 1]]."""
    n = indptr.size - 1
    at = ptr[:n].copy()
    for r in range(n):
        if diagonal:
            out[at[r]] = r
            at[r] += 1
        for j in range(indptr[r], indptr[r + 1]):
            c = indices[j]
            out[at[r]] = c
            at[r] += 1
            if transpose:
                out[at[c]] = r
                at[c] += 1


@njit(cache=True)
def _merge_rows(ptr, out, diagonal):
    """Sort each row and keep one copy of each column (the diagonal only with
    ``diagonal``), in place at the row's start; returns the rows' new lengths. Serial: a
    parallel region here starts numba's OpenMP pool, and ``default`` later forks its
    Mt-KaHyPar child, which GNU OpenMP then aborts."""
    n = ptr.size - 1
    keep = np.zeros(n, dtype=np.int64)
    for r in range(n):
        row = out[ptr[r]:ptr[r + 1]]
        row.sort()
        k = 0
        for i in range(row.size):
            if (diagonal or row[i] != r) and (k == 0 or row[i] != row[k - 1]):
                row[k] = row[i]
                k += 1
        keep[r] = k
    return keep


@njit(cache=True)
def _transpose(ptr, idx, tptr, tidx):
    """The transpose of the pattern (ptr, idx) into (tptr, tidx): rows scanned in order, so
    each transposed row comes out sorted."""
    for j in range(idx.size):
        tptr[idx[j] + 1] += 1
    for c in range(tptr.size - 1):
        tptr[c + 1] += tptr[c]
    at = tptr[:-1].copy()
    for r in range(ptr.size - 1):
        for j in range(ptr[r], ptr[r + 1]):
            c = idx[j]
            tidx[at[c]] = r
            at[c] += 1


@njit(cache=True)
def _compact_rows(ptr, out, keep, out_ptr):
    """Move each row's kept entries down to out_ptr (never past a later row's start)."""
    for r in range(keep.size):
        lo, to = ptr[r], out_ptr[r]
        for i in range(keep[r]):
            out[to + i] = out[lo + i]
