"""Adjacency normalizations of GCN and GraphSAGE-mean, offline or on distributed block rows.

Convention: rows are targets (row i aggregates its in-neighbours), as in ``Graph.adj``.

- GCN (Kipf & Welling): ``Â = D^-1/2 (A + I) D^-1/2`` with ``D`` the row sums of ``A + I``
  (in-degrees, self loop included). Self loops already present keep their weight ("remaining
  self loops"); this is PyTorch Geometric's ``gcn_norm`` for directed graphs too.
- Mean: ``D^-1 A`` with ``D`` the row sums of A (vertices with no in-neighbour aggregate 0).

Both are refused (one ``SpmmgnnError`` naming the first vertex) when a degree that has to be
divided by or square-rooted is <= 0 in a row that holds a non-zero weight: negative edge
weights make the normalization undefined, and returning zeros would train on biases alone.
Both are invariant under scaling the weights, so when the weights are so large that a degree
could overflow (``SCALE_ABOVE``), they are divided by a power of two first (exact): finite
weights always give a finite normalized matrix, equal to the unscaled one where that is finite.

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

from ..exchange.collectives import fetch_rows_by_id
from ..runtime.errors import SpmmgnnError, collective_error
from ..runtime.jit import njit

NORMALIZATIONS = ("gcn", "mean", "none")
# weights above this are scaled down first: a row sum of up to 2**31 of them stays finite
SCALE_ABOVE = 2.0**960
NO_VERTEX = float(2**63)


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


def weight_scale(max_abs: float) -> float:
    """The power of four (exact to divide by, exact under the square root) that brings
    weights of magnitude up to ``max_abs`` near 1 when they exceed ``SCALE_ABOVE``; else 1."""
    if not np.isfinite(max_abs) or max_abs <= SCALE_ABOVE:
        return 1.0
    exponent = int(np.frexp(max_abs)[1])  # max_abs < 2**exponent <= 2**1024
    return float(np.ldexp(1.0, 2 * min(exponent // 2, 511)))


def _max_abs(A: sp.csr_array) -> float:
    """The largest magnitude among the finite values (0.0 if none), in one pass."""
    return float(_finite_max_abs(A.data)) if A.nnz else 0.0


@njit(cache=True, nogil=True)
def _finite_max_abs(data):
    best = 0.0
    for v in data:
        a = abs(v)
        if a > best and a != np.inf:  # (NaN compares false)
            best = a
    return best


@njit(cache=True, nogil=True)
def _rows_with_nonzero(indptr, data):
    """True for each row holding a value != 0."""
    out = np.zeros(indptr.size - 1, dtype=np.bool_)
    for i in range(indptr.size - 1):
        for t in range(indptr[i], indptr[i + 1]):
            if data[t] != 0:
                out[i] = True
                break
    return out


def _degrees(A: sp.csr_array, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """(row sums of A / scale, rows whose sum is <= 0 although they hold a non-zero)."""
    deg = np.asarray(_scaled(A, scale).sum(axis=1), dtype=np.float64).ravel()
    return deg, (deg <= 0) & _rows_with_nonzero(A.indptr, A.data)


def _degree_error(kind: str, count: int, vertex: int, degree: float) -> str:
    what = "incoming edge weights plus the self loop" if kind == "gcn" else "incoming edge weights"
    return (f"the {kind!r} normalization is undefined: {count} vertex(es) have a degree (the "
            f"sum of the {what}) <= 0, first vertex {vertex} with {degree:.6g}; negative edge "
            "weights cause it: make the edge weights non-negative (e.g. their absolute values)")


def _check_degrees(kind: str, deg: np.ndarray, bad: np.ndarray, ids=None) -> None:
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        vertex = first if ids is None else int(np.asarray(ids)[first])
        raise SpmmgnnError(_degree_error(kind, int(bad.sum()), vertex, deg[first]))


def _scaled(A: sp.csr_array, scale: float) -> sp.csr_array:
    if scale != 1.0:
        A = A.copy()
        A.data /= scale
    return A


def gcn_norm(A) -> sp.csr_array:
    """Offline ``D^-1/2 (A + I) D^-1/2`` of a whole square CSR matrix."""
    B = _add_remaining_self_loops(A)
    scale = weight_scale(_max_abs(B))
    deg, bad = _degrees(B, scale)
    _check_degrees("gcn", deg, bad)
    s = _inv(deg, 0.5)
    B = _row_scale(_scaled(B, scale), s)
    B.data *= s[B.indices]
    return B


def gcn_norm_pattern(indptr: np.ndarray, indices: np.ndarray,
                     dtype=np.float32) -> sp.csr_array:
    """``gcn_norm`` of an unweighted pattern given as a CSR's ``indptr`` / ``indices`` (any
    arrays: memory-mapped ``.npy`` files too, each row's columns sorted and distinct, rows
    the targets), for graphs too large for the float64 copies ``gcn_norm`` makes: one pass
    counts the missing self loops, one writes the new indices (int32, as the pointers,
    below 2^31 non-zeros; the loop in sorted place) and the values ``d_i^-1/2 d_j^-1/2`` in
    ``dtype``, with ``d`` the in-degree plus one. Holds the result (nnz + n indices and
    values) and three arrays of n + 1."""
    indptr = np.asarray(indptr)
    n = indptr.size - 1
    missing = _lacks_loop(indptr, indices)
    out_ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.diff(indptr) + missing, out=out_ptr[1:])
    inv = 1.0 / np.sqrt((np.diff(out_ptr)).astype(np.float64))   # every row has its loop
    index = np.int32 if out_ptr[-1] < 2**31 and n < 2**31 else np.int64   # as scipy keeps
    out_ptr = out_ptr.astype(index, copy=False)
    out_idx = np.empty(int(out_ptr[-1]), dtype=index)
    out_val = np.empty(int(out_ptr[-1]), dtype=dtype)
    _fill_loops(indptr, indices, inv, out_ptr, out_idx, out_val)
    return sp.csr_array((out_val, out_idx, out_ptr), shape=(n, n))


@njit(cache=True, nogil=True)
def _lacks_loop(indptr, indices):
    """1 for each row without a diagonal entry, else 0 (int64)."""
    n = indptr.size - 1
    out = np.ones(n, dtype=np.int64)
    for i in range(n):
        for t in range(indptr[i], indptr[i + 1]):
            if indices[t] == i:
                out[i] = 0
                break
    return out


@njit(cache=True, nogil=True)
def _fill_loops(indptr, indices, inv, out_ptr, out_idx, out_val):
    """Row i's columns with column i inserted in sorted place when missing, and their
    values ``inv[i] inv[j]``."""
    for i in range(indptr.size - 1):
        k = out_ptr[i]
        placed = out_ptr[i + 1] - out_ptr[i] == indptr[i + 1] - indptr[i]
        for t in range(indptr[i], indptr[i + 1]):
            j = indices[t]
            if not placed and j > i:
                out_idx[k] = i
                out_val[k] = inv[i] * inv[i]
                k += 1
                placed = True
            out_idx[k] = j
            out_val[k] = inv[i] * inv[j]
            k += 1
        if not placed:
            out_idx[k] = i
            out_val[k] = inv[i] * inv[i]


def mean_norm(A, ids=None) -> sp.csr_array:
    """Offline ``D^-1 A`` (row-stochastic mean aggregation). Purely row-local, so it serves
    block rows too (``ids``: the vertex id of each row, for the error)."""
    A = sp.csr_array(A, dtype=np.float64)
    A.sum_duplicates()
    scale = weight_scale(_max_abs(A))
    deg, bad = _degrees(A, scale)
    _check_degrees("mean", deg, bad, ids)
    return _row_scale(_scaled(A, scale), _inv(deg, 1.0))


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


def _agree_on_degrees(comm: MPI.Comm, kind: str, deg: np.ndarray, bad: np.ndarray, ids,
                      max_abs: float = 0.0) -> float:
    """Collective: the largest ``max_abs`` over the ranks; the same error on every rank when
    any rank has a row of undefined degree (``bad``), naming the smallest such vertex id."""
    first = np.flatnonzero(bad)
    vertex = float(np.asarray(ids)[first].min()) if first.size else NO_VERTEX
    mine = np.array([max_abs, -vertex], dtype=np.float64)
    comm.Allreduce(MPI.IN_PLACE, mine, op=MPI.MAX)
    if -mine[1] < NO_VERTEX:
        count = comm.allreduce(int(bad.sum()), op=MPI.SUM)
        at = np.flatnonzero(np.asarray(ids) == -mine[1])
        degree = comm.allreduce(float(deg[at[0]]) if at.size and bad[at[0]] else np.inf,
                                op=MPI.MIN)
        raise collective_error(_degree_error(kind, count, int(-mine[1]), degree))
    return float(mine[0])


def gcn_norm_block_row(block: sp.csr_array, offsets: np.ndarray, comm: MPI.Comm,
                       block_index: int | None = None, ids=None) -> sp.csr_array:
    """Distributed GCN normalization of this rank's block row.

    ``comm`` has one rank per block row, rank b owning rows offsets[b]:offsets[b+1] (the
    grid's ``across_block_rows``); ``block`` holds rows lo:hi with global column ids.
    ``ids``: the vertex id of each row for the error (default lo, lo+1, ...). The weight
    scale (see the module docstring) is agreed over the ranks in the same reduction as the
    degree check. Holds the block row with its loops (int32 indices below 2^31, float64
    values) and nothing else per non-zero: the ghost columns' degrees are fetched once per
    distinct column and the scaling runs in place.
    """
    b = comm.Get_rank() if block_index is None else block_index
    lo, hi = int(offsets[b]), int(offsets[b + 1])
    ids = np.arange(lo, lo + block.shape[0]) if ids is None else ids
    B = _with_self_loops(block, lo)
    max_abs = _max_abs(B)
    deg, bad = _degrees(B, weight_scale(max_abs))  # the sign does not depend on the scale
    scale = weight_scale(_agree_on_degrees(comm, "gcn", deg, bad, ids, max_abs))
    if scale != 1.0:
        deg = _degrees(B, scale)[0]
    from ..local.split import ghost_columns

    ghost = ghost_columns(B.indices, lo, hi, B.shape[1])
    inv_own = _inv(deg, 0.5)
    inv_ghost = _inv(fetch_owned_values(comm, offsets, deg, ghost), 0.5)
    _scale_in_place(B.indptr, B.indices, B.data, scale, inv_own, lo, hi, ghost, inv_ghost)
    return B


def _with_self_loops(block: sp.csr_array, lo: int) -> sp.csr_array:
    """``_add_remaining_self_loops`` (a new float64 CSR) without its per-non-zero
    temporaries: the same float64 view (a copy for other dtypes) with its duplicates summed
    in place, then two numba passes, like ``gcn_norm_pattern``'s. The result is the same:
    explicit zeros dropped (scipy's sum with the identity drops them), a unit loop in every
    row without a diagonal entry."""
    A = sp.csr_array(block, dtype=np.float64)
    A.sum_duplicates()  # (sorts each row first)
    keep = _loop_counts(A.indptr, A.indices, A.data, lo)
    nnz = int(keep.sum())
    index = np.int32 if nnz < 2**31 and max(A.shape) < 2**31 else np.int64
    out_ptr = np.zeros(A.shape[0] + 1, dtype=index)
    np.cumsum(keep, out=out_ptr[1:])
    out_idx = np.empty(nnz, dtype=index)
    out_val = np.empty(nnz, dtype=np.float64)
    _fill_with_loops(A.indptr, A.indices, A.data, lo, out_ptr, out_idx, out_val)
    return sp.csr_array((out_val, out_idx, out_ptr), shape=A.shape)


@njit(cache=True, nogil=True)
def _loop_counts(indptr, indices, data, lo):
    """Per row: its non-zero values, plus one when the row has no diagonal entry."""
    n = indptr.size - 1
    out = np.empty(n, dtype=np.int64)
    for i in range(n):
        kept, has = 0, False
        for t in range(indptr[i], indptr[i + 1]):
            if indices[t] == lo + i:
                has = True
            if data[t] != 0:
                kept += 1
        out[i] = kept + (0 if has else 1)
    return out


@njit(cache=True, nogil=True)
def _fill_with_loops(indptr, indices, data, lo, out_ptr, out_idx, out_val):
    """Row i's non-zero values (as float64) with a unit entry at column lo + i inserted
    in sorted place when the row has no diagonal entry (explicit zero ones included)."""
    for i in range(indptr.size - 1):
        has = False
        for t in range(indptr[i], indptr[i + 1]):
            if indices[t] == lo + i:
                has = True
        k = out_ptr[i]
        placed = has
        for t in range(indptr[i], indptr[i + 1]):
            j = indices[t]
            if not placed and j > lo + i:
                out_idx[k] = lo + i
                out_val[k] = 1.0
                k += 1
                placed = True
            if data[t] != 0:
                out_idx[k] = j
                out_val[k] = data[t]
                k += 1
        if not placed:
            out_idx[k] = lo + i
            out_val[k] = 1.0


@njit(cache=True, nogil=True)
def _scale_in_place(indptr, indices, data, scale, inv_own, lo, hi, ghost, inv_ghost):
    """data[t] = data[t] / scale * inv_row * inv_col, in the order (and so with the
    roundings) of ``_row_scale(_scaled(B, scale), inv_row)`` then ``*= inv_col``; a
    column's factor is ``inv_own[j - lo]`` when owned, else ``inv_ghost`` at its place in
    ``ghost`` (sorted)."""
    for i in range(indptr.size - 1):
        r = inv_own[i]
        for t in range(indptr[i], indptr[i + 1]):
            j = indices[t]
            v = data[t]
            if scale != 1.0:
                v = v / scale
            v = v * r
            if lo <= j < hi:
                v = v * inv_own[j - lo]
            else:
                v = v * inv_ghost[np.searchsorted(ghost, j)]
            data[t] = v


def mean_norm_block_row(block: sp.csr_array, comm: MPI.Comm | None = None,
                        ids=None) -> sp.csr_array:
    """Mean normalization of a block row: local (row scaling); with ``comm`` the degree
    check is agreed over the ranks (one small reduction)."""
    if comm is None:
        return mean_norm(block, ids)
    A = sp.csr_array(block, dtype=np.float64)
    A.sum_duplicates()
    scale = weight_scale(_max_abs(A))
    deg, bad = _degrees(A, scale)
    _agree_on_degrees(comm, "mean", deg, bad, np.arange(A.shape[0]) if ids is None else ids)
    return _row_scale(_scaled(A, scale), _inv(deg, 1.0))


def normalize_block_row(block: sp.csr_array, kind: str, offsets: np.ndarray,
                        comm: MPI.Comm, ids=None) -> sp.csr_array:
    """Distributed normalization by name (collective over ``comm``). ``ids``: the vertex
    id of each row, named by the error of an undefined degree."""
    if kind == "gcn":
        return gcn_norm_block_row(block, offsets, comm, ids=ids)
    if kind == "mean":
        return mean_norm_block_row(block, comm, ids)
    if kind == "none":
        return sp.csr_array(block, dtype=np.float64)
    raise ValueError(f"unknown normalization {kind!r}; choose one of {NORMALIZATIONS}")
