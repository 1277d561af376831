"""The partitioning model shared by every partitioner: column-net hypergraph, loads, load cap.

For the matrix ``A`` the SpMM applies and a part vector on its rows, the communication of
column c is the net {c} U {r : A[r, c] != 0} (the owner vertex c is a pin of its own net), so
the connectivity-1 cost of this *column-net* hypergraph equals the total volume of docs/metrics.md
exactly, for any A (directed, non-symmetric, with or without a diagonal).

Vertex v "is in" the nets of the columns of row v of ``B = pattern(A) + I``; net c "holds" the
rows of column c of B. The compute load of a vertex is the non-zeros of its row of A.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..errors import SpmmgnnError
from ..jit import njit


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


def pattern(A: sp.csr_array) -> sp.csr_array:
    """0/1 int8 pattern of A with duplicates merged and explicit zeros kept (like ``metrics``)."""
    P = sp.csr_array((np.ones(A.indices.size, dtype=np.int8), A.indices.copy(),
                      A.indptr.copy()), shape=A.shape)  # copies: never reorder the caller's A
    P.sum_duplicates()
    P.data[:] = 1
    return P


def row_loads(A: sp.csr_array) -> np.ndarray:
    """Compute load per vertex: the stored non-zeros of its row (docs/metrics.md)."""
    return np.diff(A.indptr).astype(np.int64)


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
        n = A.shape[0]
        B = pattern(A) + sp.eye_array(n, dtype=np.int8, format="csr")
        B = sp.csr_array(B)
        B.sum_duplicates()
        B.sort_indices()
        C = sp.csc_array(B)
        C.sort_indices()
        ids = np.arange(n, dtype=np.int64)
        return cls(n=n, vptr=B.indptr.astype(np.int64), vnets=B.indices.astype(np.int64),
                   nptr=C.indptr.astype(np.int64), npins=C.indices.astype(np.int64),
                   owner=ids, optr=np.arange(n + 1, dtype=np.int64), onets=ids)

    def net_sizes(self) -> np.ndarray:
        return np.diff(self.nptr)


def symmetric_graph(A: sp.csr_array) -> sp.csr_array:
    """Pattern of A + A^T without the diagonal: the undirected graph the graph partitioners
    see (a non-symmetric A is symmetrized, so their objective only approximates the volume)."""
    P = pattern(A)
    G = sp.csr_array(P + P.T)
    del P
    G.sort_indices()
    # the diagonal dropped in place (no int64 row array, no COO round trip: at 2 x 10^8
    # non-zeros those were several GB)
    end = _drop_diagonal(G.indptr, G.indices)
    return sp.csr_array((np.ones(end, dtype=np.int8), G.indices[:end], G.indptr),
                        shape=G.shape)


@njit(cache=True)
def _drop_diagonal(indptr, indices):
    """Compact the CSR arrays in place without the entries (r, r); returns the new nnz."""
    out = 0
    start = indptr[0]
    for r in range(indptr.size - 1):
        stop = indptr[r + 1]
        for j in range(start, stop):
            if indices[j] != r:
                indices[out] = indices[j]
                out += 1
        start = stop
        indptr[r + 1] = out
    return out
