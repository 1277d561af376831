"""Minimum vertex cover of a bipartite graph (König's theorem), for hybrid aggregation.

Given the biadjacency ``B`` (rows x columns), a maximum matching gives a minimum vertex cover
of the same size: let Z be the vertices reachable from the unmatched rows by alternating
paths (row -> column over any edge, column -> row over its matching edge); the cover is
(rows not in Z) + (columns in Z). The matching is scipy's Hopcroft-Karp; the alternating
search is one breadth-first pass in numba, O(edges) (a frontier-at-a-time sparse product
cost O(edges) per level, and the levels of a long alternating path made it the slow part of
``spmmgnn model --memory``). Z is a set, so the cover does not depend on the search order.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..runtime.jit import njit


def min_vertex_cover(B: sp.csr_array) -> tuple[np.ndarray, np.ndarray]:
    """Boolean masks (rows in the cover, columns in the cover) of a minimum vertex cover of
    the bipartite graph with biadjacency ``B`` (its stored entries are the edges)."""
    from scipy.sparse.csgraph import maximum_bipartite_matching  # loads only when needed

    B = sp.csr_array(B)
    n_rows, n_cols = B.shape
    if B.nnz == 0:
        return np.zeros(n_rows, dtype=bool), np.zeros(n_cols, dtype=bool)
    pattern = sp.csr_array((np.ones(B.nnz, dtype=np.int8), B.indices, B.indptr), shape=B.shape)
    row_match = maximum_bipartite_matching(pattern, perm_type="column")  # row -> col or -1
    col_match = np.full(n_cols, -1, dtype=np.int64)
    matched = row_match >= 0
    col_match[row_match[matched]] = np.flatnonzero(matched)
    reached_rows, reached_cols = _alternating_reach(B.indptr.astype(np.int64), B.indices,
                                                    row_match.astype(np.int64), col_match)
    has_edges = np.diff(B.indptr) > 0
    return has_edges & ~reached_rows, reached_cols


@njit(cache=True, nogil=True)
def _alternating_reach(indptr, indices, row_match, col_match):
    """Rows and columns reachable from the unmatched rows with edges by alternating paths."""
    n_rows, n_cols = indptr.size - 1, col_match.size
    reached_rows = np.zeros(n_rows, dtype=np.bool_)
    reached_cols = np.zeros(n_cols, dtype=np.bool_)
    queue = np.empty(n_rows, dtype=np.int64)
    tail = 0
    for r in range(n_rows):
        if row_match[r] < 0 and indptr[r + 1] > indptr[r]:
            reached_rows[r] = True
            queue[tail] = r
            tail += 1
    head = 0
    while head < tail:
        r = queue[head]
        head += 1
        for t in range(indptr[r], indptr[r + 1]):
            c = indices[t]
            if not reached_cols[c]:
                reached_cols[c] = True
                p = col_match[c]
                if p >= 0 and not reached_rows[p]:
                    reached_rows[p] = True
                    queue[tail] = p
                    tail += 1
    return reached_rows, reached_cols
