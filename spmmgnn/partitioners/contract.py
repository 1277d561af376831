"""A first coarsening level in front of KaMinPar for graphs too large for it.

KaMinPar holds its input and every level of its own hierarchy; on R-MAT 2^24 (16.8M
vertices, 4.6 x 10^8 symmetric entries) at k = 64 it grew past 22 GB on a 24 GB machine.
So above ``COARSEN_ABOVE`` (n x k) the symmetrized graph is
contracted here first, lean, in numba, and KaMinPar partitions the clusters:

1. **isolated vertices** (no neighbour: 58 % of R-MAT 2^24's) are left out; they cost no
   communication wherever they go, and ``fill_isolated`` puts them into the parts' room
   under the load cap afterwards;
2. **size-constrained label propagation** (``lp_clusters``, as the coarsening of KaMinPar
   and KaHIP): each vertex in turn joins the neighbouring cluster it has the most edges to,
   if that keeps the cluster's load at most ``max_weight``; a few rounds;
3. **contraction** (``contract_graph``): one coarse vertex per cluster, its load the sum,
   one unweighted edge per pair of adjacent clusters (count, then fill, per cluster);
4. KaMinPar partitions the coarse graph with the same load caps, and every vertex takes
   its cluster's part. The rebalance and refinement after KaMinPar (``partition``) then run
   on the original graph as always.

Serial numba passes: a parallel region would start numba's OpenMP pool in the process
``default`` later forks (see ``model._merge_rows``).
"""

from __future__ import annotations

import numpy as np

from ..runtime.jit import njit
from .multilevel import _transpose

# coarsen when n x k exceeds this: R-MAT 2^22 at k = 64 (2^28) ran KaMinPar directly at
# 2.7-7 GB; 2^24 at k = 64 did not fit 24 GB
COARSEN_ABOVE = 2**28
# the coarse graph's target: about this many vertices x k (2M clusters at k = 64)
COARSE_TARGET = 2**27
LP_ROUNDS = 3


def coarsened(n: int, k: int, above: int | None = None) -> bool:
    """Whether ``kaminpar_parts`` partitions a contraction (n x k above ``above``, default
    ``COARSEN_ABOVE``)."""
    return int(n) * int(k) > (COARSEN_ABOVE if above is None else int(above))


@njit(cache=True)
def _lp(indptr, indices, weights, max_weight, rounds, order):
    """Size-constrained label propagation; returns each vertex's cluster label (a vertex id)."""
    n = indptr.size - 1
    label = np.arange(n)
    load = weights.astype(np.int64).copy()     # load of the cluster labelled c, at index c
    rating = np.zeros(n, dtype=np.int64)        # edges from v to cluster c (reset after v)
    touched = np.empty(n, dtype=np.int64)
    for _ in range(rounds):
        moved = 0
        for i in range(n):
            v = order[i]
            lo, hi = indptr[v], indptr[v + 1]
            if lo == hi:
                continue
            m = 0
            for j in range(lo, hi):
                c = label[indices[j]]
                if rating[c] == 0:
                    touched[m] = c
                    m += 1
                rating[c] += 1
            own = label[v]
            best, best_rating = own, rating[own]
            wv = weights[v]
            for t in range(m):
                c = touched[t]
                r = rating[c]
                if c != own and (r > best_rating or (r == best_rating and c < best)) \
                        and load[c] + wv <= max_weight:
                    best, best_rating = c, r
            for t in range(m):
                rating[touched[t]] = 0
            if best != own:
                load[own] -= wv
                load[best] += wv
                label[v] = best
                moved += 1
        if moved == 0:
            break
    return label


def lp_clusters(indptr: np.ndarray, indices: np.ndarray, weights: np.ndarray,
                max_weight: int, rounds: int = LP_ROUNDS,
                seed: int = 0) -> tuple[np.ndarray, int]:
    """(cluster of each vertex in 0..nc-1, nc): size-constrained label propagation on the
    symmetric graph (indptr, indices), each cluster's summed ``weights`` at most
    ``max_weight`` (a vertex heavier than it stays alone), vertices visited in a seeded
    random order."""
    n = indptr.size - 1
    order = np.random.default_rng(seed).permutation(n)
    label = _lp(indptr, indices, weights, int(max_weight), int(rounds), order)
    _, cluster = np.unique(label, return_inverse=True)
    return cluster.astype(np.int64), int(cluster.max(initial=-1)) + 1


@njit(cache=True)
def _coarse_rows(indptr, indices, cluster, mptr, members, cptr, cidx, fill):
    """Per cluster c, the other clusters adjacent to it, once each (``fill`` False: only
    their count into cptr[c + 1]; True: them into cidx[cptr[c]:], sorted)."""
    nc = mptr.size - 1
    mark = np.full(nc, -1, dtype=np.int64)
    for c in range(nc):
        k = cptr[c] if fill else 0
        start = k
        for i in range(mptr[c], mptr[c + 1]):
            v = members[i]
            for j in range(indptr[v], indptr[v + 1]):
                d = cluster[indices[j]]
                if d != c and mark[d] != c:
                    mark[d] = c
                    if fill:
                        cidx[k] = d
                    k += 1
        if fill:
            cidx[start:k].sort()
        else:
            cptr[c + 1] = k


def contract_graph(indptr: np.ndarray, indices: np.ndarray, cluster: np.ndarray,
                   nc: int) -> tuple[np.ndarray, np.ndarray]:
    """(indptr int64, indices int32) of the cluster graph: clusters c != d adjacent when a
    vertex of c has a neighbour in d, one entry each way, rows sorted, no diagonal."""
    # the vertices of each cluster: the transpose of the vertex -> cluster map
    mptr, members = _transpose(np.arange(cluster.size + 1), cluster, nc)
    cptr = np.zeros(nc + 1, dtype=np.int64)
    _coarse_rows(indptr, indices, cluster, mptr, members, cptr, np.empty(0, np.int32), False)
    np.cumsum(cptr, out=cptr)
    cidx = np.empty(int(cptr[-1]), dtype=np.int32)
    _coarse_rows(indptr, indices, cluster, mptr, members, cptr, cidx, True)
    return cptr, cidx


def fill_isolated(parts: np.ndarray, loads: np.ndarray, isolated: np.ndarray, k: int,
                  cap: int) -> None:
    """Give the ``isolated`` vertices (no neighbour: no communication anywhere) parts, in
    place: the room each part has under ``cap`` after the others, filled in part order
    (any room left over: the lightest parts take the rest in turn)."""
    if isolated.size == 0:
        return
    placed = np.zeros(parts.size, dtype=bool)
    placed[isolated] = True
    part_load = np.bincount(parts[~placed], weights=loads[~placed], minlength=k)
    room = np.maximum(cap - part_load, 0)
    # the i-th isolated vertex goes where the running sum of their loads falls in the
    # running sum of the parts' room
    ends = np.cumsum(room)
    at = np.cumsum(loads[isolated]) - loads[isolated]
    target = np.searchsorted(ends, at, side="right")
    over = target >= k  # no room left: round-robin over the parts, lightest first
    if over.any():
        lightest = np.argsort(part_load, kind="stable")
        target[over] = lightest[np.arange(int(over.sum())) % k]
    parts[isolated] = target
