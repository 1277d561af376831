"""Partition-preserving coarsening of a column-net hypergraph, for multilevel refinement.

Single-vertex moves cannot change the shape of a part (on a mesh, moving one boundary
vertex just moves the boundary), so refinement is also run on coarser versions of the
hypergraph whose vertices are clusters of vertices of one part: moving a cluster moves a
whole piece of a part. Clusters come from heavy-edge rating (a pair sharing net c scores
1 / (|c| - 1); nets larger than ``max_net`` are ignored, as hub columns connect everything)
with a cluster weight limit; only vertices of the same part are joined, so the current
partition is exactly representable on every level. Contraction keeps every net with at
least two distinct clusters, owned by the cluster of its owner vertex.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .model import ColumnNet


@njit(cache=True)
def _cluster(vptr, vnets, nptr, npins, part, w, max_w, order, max_net):
    """Cluster representative of every vertex (heavy-edge clustering inside parts)."""
    n = part.size
    rep = np.full(n, -1, dtype=np.int64)
    cw = np.zeros(n, dtype=np.int64)
    rating = np.zeros(n, dtype=np.float64)
    touched = np.empty(n, dtype=np.int64)
    for v in order:
        if rep[v] != -1:
            continue
        nt = 0
        for j in range(vptr[v], vptr[v + 1]):
            c = vnets[j]
            size = nptr[c + 1] - nptr[c]
            if size < 2 or size > max_net:
                continue
            r = 1.0 / (size - 1)
            for i in range(nptr[c], nptr[c + 1]):
                u = npins[i]
                if u != v and part[u] == part[v]:
                    if rating[u] == 0.0:
                        touched[nt] = u
                        nt += 1
                    rating[u] += r
        best = -1
        bestr = 0.0
        bestw = 0
        for t in range(nt):
            u = touched[t]
            r = rating[u]
            rating[u] = 0.0
            target = rep[u] if rep[u] != -1 else u
            tw = cw[target] if rep[u] != -1 else w[u]
            if tw + w[v] > max_w:
                continue
            if r > bestr or (r == bestr and tw < bestw):
                best = target
                bestr = r
                bestw = tw
        if best == -1:
            rep[v] = v
            cw[v] = w[v]
        else:
            if rep[best] == -1:
                rep[best] = best
                cw[best] = w[best]
            rep[v] = best
            cw[best] += w[v]
    return rep


def coarsen(hg: ColumnNet, loads: np.ndarray, parts: np.ndarray, max_w: int, seed: int,
            max_net: int = 1000) -> tuple[ColumnNet, np.ndarray, np.ndarray]:
    """One coarsening level: (coarse hypergraph, coarse loads, fine vertex -> cluster id)."""
    order = np.random.default_rng(seed).permutation(hg.n)
    rep = _cluster(hg.vptr, hg.vnets, hg.nptr, hg.npins, parts, loads, int(max_w), order,
                   int(max_net))
    _, cl = np.unique(rep, return_inverse=True)
    cl = cl.astype(np.int64)
    n2 = int(cl.max()) + 1 if cl.size else 0
    sizes = hg.net_sizes()
    net_of_pin = np.repeat(np.arange(hg.m, dtype=np.int64), sizes)
    keys = np.unique(net_of_pin * max(n2, 1) + cl[hg.npins])
    net, pin = keys // max(n2, 1), keys % max(n2, 1)
    keep = np.bincount(net, minlength=hg.m) >= 2
    new_id = np.cumsum(keep) - 1
    sel = keep[net]
    net2, pin2 = new_id[net[sel]], pin[sel]
    m2 = int(keep.sum())
    nptr = np.zeros(m2 + 1, dtype=np.int64)
    np.cumsum(np.bincount(net2, minlength=m2), out=nptr[1:])
    by_pin = np.argsort(pin2, kind="stable")
    vptr = np.zeros(n2 + 1, dtype=np.int64)
    np.cumsum(np.bincount(pin2, minlength=n2), out=vptr[1:])
    owner = cl[hg.owner[keep]]
    by_owner = np.argsort(owner, kind="stable").astype(np.int64)
    optr = np.zeros(n2 + 1, dtype=np.int64)
    np.cumsum(np.bincount(owner, minlength=n2), out=optr[1:])
    coarse = ColumnNet(n=n2, vptr=vptr, vnets=net2[by_pin], nptr=nptr, npins=pin2,
                       owner=owner, optr=optr, onets=by_owner)
    w2 = np.bincount(cl, weights=loads, minlength=n2).astype(np.int64)
    return coarse, w2, cl
