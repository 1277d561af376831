"""Synthetic sparse matrices for tests and benchmarks (vectorized, seeded)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def _coo_to_csr(rows, cols, n: int, vals=None, dtype=np.float64) -> sp.csr_array:
    vals = np.ones(rows.size, dtype=dtype) if vals is None else vals
    A = sp.csr_array((vals, (rows, cols)), shape=(n, n))
    A.sum_duplicates()
    A.data[:] = 1 if vals is None else A.data
    return A


def random_graph(n: int, avg_degree: float, seed: int = 0, directed: bool = True,
                 self_loops: bool = False) -> sp.csr_array:
    """Erdos-Renyi-like graph with ~n*avg_degree non-zeros (duplicates merged)."""
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


def rmat(scale: int, edge_factor: int = 16, seed: int = 0, abcd=(0.57, 0.19, 0.19, 0.05),
         symmetric: bool = True, permute: bool = True) -> sp.csr_array:
    """R-MAT power-law graph (Graph500 parameters): 2**scale vertices, edge_factor*n edges
    drawn, self loops and duplicates removed, optionally symmetrized and randomly relabelled
    (R-MAT's vertex ids carry its recursive structure, which flatters block partitions)."""
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
