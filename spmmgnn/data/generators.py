"""Synthetic sparse matrices for tests and benchmarks (vectorized, seeded)."""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from ..runtime.errors import SpmmgnnError
from ..runtime.machine import check_memory

# bytes a generator holds at its peak per drawn entry (int64 row and column, their
# filtered and mirrored copies, the COO -> CSR conversion) and per vertex
BYTES_PER_ENTRY = 96
BYTES_PER_VERTEX = 24


def check_size(what: str, n, entries, extra_bytes: float = 0.0) -> None:
    """SpmmgnnError before generating ``n`` vertices and ``entries`` drawn entries (and
    ``extra_bytes`` of other arrays): a count that is negative or not finite, or more memory
    than this node has."""
    if not all(isinstance(v, (int, float, np.integer, np.floating)) and math.isfinite(v)
               and v >= 0 for v in (n, entries)):
        raise SpmmgnnError(f"{what}: the vertex and edge counts must be finite and >= 0, "
                           f"got n={n}, entries={entries}")
    check_memory(BYTES_PER_ENTRY * float(entries) + BYTES_PER_VERTEX * float(n) + extra_bytes,
                 f"{what} ({float(n):.3g} vertices, {float(entries):.3g} entries)")


def _coo_to_csr(rows, cols, n: int, vals=None, dtype=np.float64) -> sp.csr_array:
    vals = np.ones(rows.size, dtype=dtype) if vals is None else vals
    A = sp.csr_array((vals, (rows, cols)), shape=(n, n))
    A.sum_duplicates()
    A.data[:] = 1 if vals is None else A.data
    return A


def random_graph(n: int, avg_degree: float, seed: int = 0, directed: bool = True,
                 self_loops: bool = False) -> sp.csr_array:
    """Erdos-Renyi-like graph with ~n*avg_degree non-zeros (duplicates merged)."""
    check_size("random graph", n, n * avg_degree * (1 if directed else 2))
    rng = np.random.default_rng(seed)
    m = int(n * avg_degree)
    rows = rng.integers(0, n, m)
    cols = rng.integers(0, n, m)
    if not self_loops:
        keep = rows != cols
        rows, cols = rows[keep], cols[keep]
    if not directed:
        rows, cols = np.concatenate([rows, cols]), np.concatenate([cols, rows])
    return _coo_to_csr(rows, cols, n)


def banded(n: int, per_row: int, half_width: int, seed: int = 0,
           directed: bool = True) -> sp.csr_array:
    """Each row's ``per_row`` columns drawn uniformly within ``half_width`` of the diagonal
    (duplicates summed, as ``_coo_to_csr`` does for every generator here): rows touch nearby
    rows of x, as after a bandwidth-reducing ordering of a mesh, and block rows have ghosts
    only near their boundaries. ``directed=False`` adds every entry's mirror (A + A.T)."""
    rng = np.random.default_rng(seed)
    rows = np.repeat(np.arange(n), per_row)
    cols = np.clip(rows + rng.integers(-half_width, half_width + 1, rows.size), 0, n - 1)
    if not directed:
        rows, cols = np.concatenate([rows, cols]), np.concatenate([cols, rows])
    return _coo_to_csr(rows, cols, n)


def rmat(scale: int, edge_factor: int = 16, seed: int = 0, abcd=(0.57, 0.19, 0.19, 0.05),
         symmetric: bool = True, permute: bool = True) -> sp.csr_array:
    """R-MAT power-law graph (Graph500 parameters): 2**scale vertices, edge_factor*n edges
    drawn, self loops and duplicates removed, optionally symmetrized and randomly relabelled
    (R-MAT's vertex ids carry its recursive structure, which flatters block partitions)."""
    if not 0 <= scale <= 62 or edge_factor < 0:
        raise SpmmgnnError(f"R-MAT needs 0 <= scale <= 62 and edge_factor >= 0, got scale "
                           f"{scale}, edge_factor {edge_factor}")
    check_size(f"R-MAT scale {scale}", 2.0**scale, edge_factor * 2.0**scale * 2)
    rng = np.random.default_rng(seed)
    n = 1 << scale
    m = edge_factor * n
    a, b, c, _ = abcd
    rows = np.zeros(m, dtype=np.int64)
    cols = np.zeros(m, dtype=np.int64)
    for level in range(scale):
        u = rng.random(m)
        down = u >= a + b  # quadrants c, d
        right = ((u >= a) & (u < a + b)) | (u >= a + b + c)
        rows |= down.astype(np.int64) << level
        cols |= right.astype(np.int64) << level
    if permute:
        p = rng.permutation(n)
        rows, cols = p[rows], p[cols]
    keep = rows != cols
    rows, cols = rows[keep], cols[keep]
    if symmetric:
        rows, cols = np.concatenate([rows, cols]), np.concatenate([cols, rows])
    return _coo_to_csr(rows, cols, n)


def grid3d(nx: int, ny: int | None = None, nz: int | None = None,
           self_loops: bool = True) -> sp.csr_array:
    """7-point stencil graph of an nx x ny x nz grid (natural order, x fastest): each vertex
    is joined to its up-to-6 axis neighbours, plus itself when ``self_loops`` (the stencil's
    centre)."""
    ny = nx if ny is None else ny
    nz = nx if nz is None else nz
    n = nx * ny * nz
    idx = np.arange(n, dtype=np.int64).reshape(nz, ny, nx)
    pairs = [(idx[:, :, :-1], idx[:, :, 1:]), (idx[:, :-1, :], idx[:, 1:, :]),
             (idx[:-1, :, :], idx[1:, :, :])]
    src = np.concatenate([a.ravel() for a, _ in pairs])
    dst = np.concatenate([b.ravel() for _, b in pairs])
    rows, cols = np.concatenate([src, dst]), np.concatenate([dst, src])
    if self_loops:
        diag = np.arange(n, dtype=np.int64)
        rows, cols = np.concatenate([rows, diag]), np.concatenate([cols, diag])
    return _coo_to_csr(rows, cols, n)


def sbm(n: int, communities: int = 100, avg_degree: float = 16.0, mixing: float = 0.2,
        seed: int = 0) -> sp.csr_array:
    """Symmetric stochastic block model: vertices fall into ``communities`` groups at random
    (so vertex ids carry no structure); ~n*avg_degree/2 edges, a fraction ``mixing`` of them
    between uniformly random vertices, the rest inside one group (a group is picked with
    probability proportional to its size). Self loops and duplicates removed."""
    if communities < 1:
        raise SpmmgnnError(f"sbm needs communities >= 1, got {communities}")
    check_size("sbm", n + communities, n * avg_degree)
    rng = np.random.default_rng(seed)
    group = rng.integers(0, communities, n)
    order = np.argsort(group, kind="stable")
    start = np.zeros(communities + 1, dtype=np.int64)
    np.cumsum(np.bincount(group, minlength=communities), out=start[1:])
    m = int(n * avg_degree / 2)
    inter = rng.random(m) < mixing
    rows = rng.integers(0, n, m)
    cols = rng.integers(0, n, m)
    # intra edges: the first end's group, the second end drawn uniformly inside it
    g = group[rows[~inter]]
    size = start[g + 1] - start[g]
    cols[~inter] = order[start[g] + (rng.random(g.size) * size).astype(np.int64)]
    keep = rows != cols
    rows, cols = rows[keep], cols[keep]
    return _coo_to_csr(np.concatenate([rows, cols]), np.concatenate([cols, rows]), n)
