"""Adjacency normalizations of GCN and GraphSAGE-mean, offline or on distributed block rows.

Convention: rows are targets (row i aggregates its in-neighbours), as in ``Graph.adj``.

- GCN (Kipf & Welling): ``Â = D^-1/2 (A + I) D^-1/2`` with ``D`` the row sums of ``A + I``
  (in-degrees, self loop included). Self loops already present keep their weight ("remaining
  self loops"); this is PyTorch Geometric's ``gcn_norm`` for directed graphs too.
- Mean: ``D^-1 A`` with ``D`` the row sums of A (vertices with no in-neighbour aggregate 0).

Offline (``gcn_norm``/``mean_norm``) works on a whole CSR. Distributed
(``gcn_norm_block_row``/``mean_norm_block_row``) works on one rank's block row (rows lo:hi,
global columns): the row scaling is local; the column scaling of GCN needs the degrees of the
ghost columns, which every rank fetches once from their owners with two ``Alltoallv`` calls
over ``grid.across_block_rows`` (one rank per block row), so no rank ever sees the whole graph
and the matrix handed to ``DistSpMM`` is exactly the offline one. Nothing is densified.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from ..collectives import fetch_rows_by_id

NORMALIZATIONS = ("gcn", "mean", "none")


def _add_remaining_self_loops(A: sp.csr_array, lo: int = 0) -> sp.csr_array:
    """Add a unit diagonal entry (row i, column lo+i) to every row that lacks one."""
    A = sp.csr_array(A, dtype=np.float64)
    A.sum_duplicates()
    n_rows = A.shape[0]
    rows = np.repeat(np.arange(n_rows, dtype=np.int64), np.diff(A.indptr))
    has = np.zeros(n_rows, dtype=bool)
    has[rows[A.indices == rows + lo]] = True
    missing = np.flatnonzero(~has)
    eye = sp.csr_array((np.ones(missing.size), (missing, missing + lo)), shape=A.shape)
    out = sp.csr_array(A + eye)
    out.sort_indices()
    return out


def _row_scale(A: sp.csr_array, s: np.ndarray) -> sp.csr_array:
    out = A.copy()
    out.data = out.data * np.repeat(s, np.diff(out.indptr))
    return out


def _inv(d: np.ndarray, power: float) -> np.ndarray:
    out = np.zeros_like(d, dtype=np.float64)
    pos = d > 0
    out[pos] = d[pos] ** -power
    return out


def gcn_norm(A) -> sp.csr_array:
    """Offline ``D^-1/2 (A + I) D^-1/2`` of a whole square CSR matrix."""
    B = _add_remaining_self_loops(A)
    s = _inv(np.asarray(B.sum(axis=1)).ravel(), 0.5)
    B = _row_scale(B, s)
    B.data *= s[B.indices]
    return B


def mean_norm(A) -> sp.csr_array:
    """Offline ``D^-1 A`` (row-stochastic mean aggregation)."""
    A = sp.csr_array(A, dtype=np.float64)
    A.sum_duplicates()
    return _row_scale(A, _inv(np.asarray(A.sum(axis=1)).ravel(), 1.0))


def normalize(A, kind: str) -> sp.csr_array:
    """Offline normalization by name: ``gcn``, ``mean`` or ``none``."""
    if kind == "gcn":
        return gcn_norm(A)
    if kind == "mean":
        return mean_norm(A)
    if kind == "none":
        return sp.csr_array(A, dtype=np.float64)
    raise ValueError(f"unknown normalization {kind!r}; choose one of {NORMALIZATIONS}")


def fetch_owned_values(comm: MPI.Comm, offsets: np.ndarray, values: np.ndarray,
                       ids: np.ndarray) -> np.ndarray:
    """Collective over ``comm`` (rank b owns rows offsets[b]:offsets[b+1]).

    Each rank passes ``values`` for its own rows and asks for global ``ids``; returns the
    owners' values for ``ids`` (int64 values stay int64, anything else travels as float64).
    Two ``Alltoallv`` calls: the requested ids, then the answers (``fetch_rows_by_id``).
    """
    dtype = np.int64 if np.asarray(values).dtype == np.int64 else np.float64
    column = np.ascontiguousarray(values, dtype=dtype).reshape(-1, 1)
    return fetch_rows_by_id(comm, offsets, column, ids)[:, 0]


def gcn_norm_block_row(block: sp.csr_array, offsets: np.ndarray, comm: MPI.Comm,
                       block_index: int | None = None) -> sp.csr_array:
    """Distributed GCN normalization of this rank's block row.

    ``comm`` has one rank per block row, rank b owning rows offsets[b]:offsets[b+1] (the
    grid's ``across_block_rows``); ``block`` holds rows lo:hi with global column ids.
    """
    b = comm.Get_rank() if block_index is None else block_index
    lo = int(offsets[b])
    B = _add_remaining_self_loops(block, lo)
    deg = np.asarray(B.sum(axis=1)).ravel()
    col_deg = fetch_owned_values(comm, offsets, deg, B.indices)
    B = _row_scale(B, _inv(deg, 0.5))
    B.data *= _inv(col_deg, 0.5)
    return B


def mean_norm_block_row(block: sp.csr_array) -> sp.csr_array:
    """Mean normalization of a block row: purely local (row scaling)."""
    return mean_norm(block)


def normalize_block_row(block: sp.csr_array, kind: str, offsets: np.ndarray,
                        comm: MPI.Comm) -> sp.csr_array:
    """Distributed normalization by name (collective over ``comm`` for ``gcn``)."""
    if kind == "gcn":
        return gcn_norm_block_row(block, offsets, comm)
    if kind == "mean":
        return mean_norm_block_row(block)
    if kind == "none":
        return sp.csr_array(block, dtype=np.float64)
    raise ValueError(f"unknown normalization {kind!r}; choose one of {NORMALIZATIONS}")
