"""The rows each exchange of ``sparse2d``/``sparse3d`` moves, counted from the partition alone
(no MPI): one pass over the CSR shared by the volume model (``volumes``) and the per-tier
model (``node_volumes``), which both import it from here so neither imports the other.
"""

from __future__ import annotations

import numpy as np

from ..runtime.jit import eager_njit


@eager_njit(cache=True, nogil=True)
def grid_rows(indptr, indices, part, pc, pl, P, record=False):
    """The rows each step of sparse2d/sparse3d moves, in one pass over the CSR (see
    ``volumes._expand_fold_rows``): ``rows[s, 0/1, r]`` sent / received by rank r in step s
    (expand, fold, fiber), ``pairs[s]`` the (sender, receiver) pairs that carry any, and
    the non-zeros of every tile. Distinct pairs are found with markers (no sort): the
    rows of process row i are contiguous, so a column last claimed by process row i is
    marked i; a tile or layer last claimed by row u is marked u. With ``record`` the
    rows themselves are listed too (``node_volumes``): ``moves[s, :, :count[s]]`` =
    (tile or rank that needs or sends the row, row id, its owner or receiver); without,
    ``moves`` is empty (the lists take 72 bytes per non-zero)."""
    rows = np.zeros((3, 2, P), dtype=np.int64)
    pairs = np.zeros((3, P, P), dtype=np.uint8)
    nnz = np.zeros(P, dtype=np.int64)
    moves = np.empty((3, 3, indices.size if record else 0), dtype=np.int64)
    count = np.zeros(3, dtype=np.int64)
    seen_col = np.full(part.size, -1, dtype=np.int64)
    seen_tile = np.full(P, -1, dtype=np.int64)
    seen_layer = np.full(pl, -1, dtype=np.int64)
    for u in range(indptr.size - 1):
        pu = part[u]
        iu, ju, lu = pu // (pc * pl), (pu // pl) % pc, pu % pl
        for t in range(indptr[u], indptr[u + 1]):
            v = indices[t]
            pv = part[v]
            jv, lv = (pv // pl) % pc, pv % pl
            tile = (iu * pc + jv) * pl + lv
            nnz[tile] += 1
            if seen_col[v] != iu:          # expand: X row v to the tile, once per tile
                seen_col[v] = iu
                if tile != pv:
                    rows[0, 0, pv] += 1
                    rows[0, 1, tile] += 1
                    pairs[0, pv, tile] = 1
                    if record:
                        _record(moves, count, 0, tile, v, pv)
            if seen_tile[tile] != u:       # fold: the tile's partial row u, once
                seen_tile[tile] = u
                if jv != ju:
                    m = (iu * pc + ju) * pl + lv
                    rows[1, 0, tile] += 1
                    rows[1, 1, m] += 1
                    pairs[1, tile, m] = 1
                    if record:
                        _record(moves, count, 1, tile, u, m)
            if lv != lu and seen_layer[lv] != u:   # fiber: layer lv's partial row u, once
                seen_layer[lv] = u
                g = (iu * pc + ju) * pl + lv
                rows[2, 0, g] += 1
                rows[2, 1, pu] += 1
                pairs[2, g, pu] = 1
                if record:
                    _record(moves, count, 2, g, u, pu)
    return rows, pairs, nnz, moves, count


@eager_njit(cache=True, nogil=True)
def _record(moves, count, s, a, b, c):
    moves[s, 0, count[s]], moves[s, 1, count[s]], moves[s, 2, count[s]] = a, b, c
    count[s] += 1
