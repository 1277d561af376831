"""Multilevel max-send refinement: the refinement of ``maxsend`` at every level of a hierarchy.

A single-vertex move cannot leave a local optimum where only a whole cluster moving helps:
on meshes and lexical graphs a boundary vertex moved out creates new boundary. Like
Graph-VB (ICPP'24) and the multilevel partitioners, this refiner

1. coarsens the column-net hypergraph by heavy-connectivity matching *inside each part* of
   the base partition (so the base partition is exact at every level), until it stops
   shrinking or has ``coarsest`` vertices per part;
2. refines the coarsest level with ``refine_max_send`` (a coarse vertex moves a whole
   cluster), projects the result one level down and refines again, up to the input.

A coarse net keeps its owner (the cluster of the fine owner) and has the clusters of its
fine pins, so its connectivity, and with it every part's send volume, equals the fine one
for any partition constant on clusters: the objective is exact at every level, and since
``refine_max_send`` never returns a worse ``max send + total / k`` than its balanced input,
no level makes it worse. Nets whose pins all fall in one cluster never cost anything and
are dropped. The load cap holds at every level (coarse loads are sums of fine loads).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..runtime.jit import njit
from .maxsend import refine_max_send
from .model import ColumnNet

# nets larger than this do not count towards how strongly two vertices are connected (hubs
# sit in nearly every small net, and scanning them would make coarsening quadratic)
MATCH_MAX_NET = 256
# levels of the hierarchy by default: on the real graphs of bench/results/partition_real.md
# (k = 16, 64) three levels gave most of what six or twelve give, at 1.5-2.3x the time of a
# single-level refinement (twelve: up to 3x)
DEFAULT_LEVELS = 3


@njit(cache=True, nogil=True)
def _match(order, part, w, max_weight, vptr, vnets, nptr, npins, max_net):
    """Heavy-connectivity matching: each unmatched vertex (in ``order``) pairs with the
    unmatched vertex of its own part sharing the most weight of nets (1 / (|net| - 1) per
    shared net), if their loads sum to at most ``max_weight``. Returns the cluster of each
    vertex (numbered in order of first appearance) and the number of clusters."""
    n = part.size
    mate = np.full(n, -1, dtype=np.int64)
    score = np.zeros(n, dtype=np.float64)
    touched = np.empty(n, dtype=np.int64)
    for v in order:
        if mate[v] >= 0:
            continue
        nt = 0
        for j in range(vptr[v], vptr[v + 1]):
            c = vnets[j]
            size = nptr[c + 1] - nptr[c]
            if size < 2 or size > max_net:
                continue
            s = 1.0 / (size - 1)
            for i in range(nptr[c], nptr[c + 1]):
                u = npins[i]
                if u == v or mate[u] >= 0 or part[u] != part[v] or w[u] + w[v] > max_weight:
                    continue
                if score[u] == 0.0:
                    touched[nt] = u
                    nt += 1
                score[u] += s
        best = -1
        best_score = 0.0
        for t in range(nt):
            u = touched[t]
            if score[u] > best_score:
                best = u
                best_score = score[u]
            score[u] = 0.0
        if best >= 0:
            mate[v] = best
            mate[best] = v
        else:
            mate[v] = v
    cluster = np.full(n, -1, dtype=np.int64)
    nc = 0
    for v in range(n):
        if cluster[v] < 0:
            cluster[v] = nc
            cluster[mate[v]] = nc
            nc += 1
    return cluster, nc


@njit(cache=True, nogil=True)
def _contract_pins(nptr, npins, cluster, nc):
    """Pins of the contracted nets (each cluster once per net, in order of appearance) and
    which nets keep at least two clusters."""
    m = nptr.size - 1
    seen = np.full(nc, -1, dtype=np.int64)
    keep = np.zeros(m, dtype=np.bool_)
    ptr = np.zeros(m + 1, dtype=np.int64)
    pins = np.empty(npins.size, dtype=np.int64)
    out = 0
    for c in range(m):
        start = out
        for i in range(nptr[c], nptr[c + 1]):
            q = cluster[npins[i]]
            if seen[q] != c:
                seen[q] = c
                pins[out] = q
                out += 1
        if out - start < 2:
            out = start
        else:
            keep[c] = True
        ptr[c + 1] = out
    return ptr, pins[:out], keep


@njit(cache=True, nogil=True)
def _transpose(ptr, idx, rows):
    """CSR of the transpose (counting sort): for each of ``rows`` targets, the sources."""
    tptr = np.zeros(rows + 1, dtype=np.int64)
    for i in range(idx.size):
        tptr[idx[i] + 1] += 1
    for r in range(rows):
        tptr[r + 1] += tptr[r]
    fill = tptr[:-1].copy()
    out = np.empty(idx.size, dtype=np.int64)
    for s in range(ptr.size - 1):
        for i in range(ptr[s], ptr[s + 1]):
            out[fill[idx[i]]] = s
            fill[idx[i]] += 1
    return tptr, out


def contract(cn: ColumnNet, cluster: np.ndarray, nc: int) -> ColumnNet:
    """The hypergraph of the clusters: net c has the clusters of its pins and the cluster of
    its owner as owner; nets inside one cluster are dropped (they never cost anything)."""
    ptr, pins, keep = _contract_pins(cn.nptr, cn.npins, cluster.astype(np.int64), nc)
    nptr = np.concatenate([[0], ptr[1:][keep]]).astype(np.int64)
    m = nptr.size - 1
    vptr, vnets = _transpose(nptr, pins, nc)
    owner = cluster[cn.owner[keep]].astype(np.int64)
    optr, onets = _transpose(np.arange(m + 1, dtype=np.int64), owner, nc)
    return ColumnNet(n=nc, vptr=vptr, vnets=vnets, nptr=nptr, npins=pins, owner=owner,
                     optr=optr, onets=onets)


@dataclass
class Level:
    """One level of the hierarchy: its hypergraph, loads and base partition, and the map
    from the finer level's vertices to its own (None at the input level)."""

    cn: ColumnNet
    loads: np.ndarray
    parts: np.ndarray
    cluster: np.ndarray | None = None


def coarsen(cn: ColumnNet, loads: np.ndarray, parts: np.ndarray, k: int, max_weight: int,
            coarsest: int = 64, max_levels: int = 12, min_shrink: float = 0.9,
            seed: int = 0, deadline: float | None = None) -> list[Level]:
    """The hierarchy, finest first: match inside parts until a level has at most
    ``coarsest * k`` vertices, shrinks by less than ``min_shrink``, ``max_levels`` is
    reached or the clock passes ``deadline`` (``time.perf_counter()``; checked before each
    level). No coarse vertex is heavier than ``max_weight`` unless a fine one is."""
    rng = np.random.default_rng(seed)
    levels = [Level(cn, loads.astype(np.int64), parts.astype(np.int64))]
    while (len(levels) <= max_levels and levels[-1].cn.n > coarsest * k
           and (deadline is None or time.perf_counter() < deadline)):
        fine = levels[-1]
        cluster, nc = _match(rng.permutation(fine.cn.n), fine.parts, fine.loads,
                             max_weight, fine.cn.vptr, fine.cn.vnets, fine.cn.nptr,
                             fine.cn.npins, MATCH_MAX_NET)
        if nc > min_shrink * fine.cn.n:
            break
        coarse_loads = np.bincount(cluster, weights=fine.loads, minlength=nc).astype(np.int64)
        coarse_parts = np.zeros(nc, dtype=np.int64)
        coarse_parts[cluster] = fine.parts
        levels.append(Level(contract(fine.cn, cluster, nc), coarse_loads, coarse_parts,
                            cluster))
    return levels


def refine_multilevel(cn: ColumnNet, loads: np.ndarray, parts: np.ndarray, k: int, cap: int,
                      *, coarsest: int = 64, max_levels: int = DEFAULT_LEVELS,
                      max_weight: int | None = None, seed: int = 0,
                      **refine_options) -> tuple[np.ndarray, dict]:
    """Refine ``parts`` with ``refine_max_send`` (its ``refine_options``) at every level of
    the hierarchy of ``coarsen``, coarsest first. ``max_weight`` bounds a cluster's load
    (default a quarter of the average part load: a cluster still fits next to others).
    Returns the parts and a report with each level's vertices, nets, score before and after
    (``max send + total / k``) and seconds. Past a ``deadline`` (a ``refine_max_send``
    option) no further level is coarsened, and the remaining levels only project the parts
    down (reported as skipped; a level's passes check it inside, every few thousand
    vertices), so the result is the input refined as far as the time allowed."""
    t0 = time.perf_counter()
    if max_weight is None:
        max_weight = max(1, int(loads.sum()) // (4 * k))
    deadline = refine_options.get("deadline")
    levels = coarsen(cn, loads, parts, k, max_weight, coarsest, max_levels, seed=seed,
                     deadline=deadline)
    t_coarsen = time.perf_counter() - t0
    report = dict(coarsen_seconds=round(t_coarsen, 3), levels=[])
    p = levels[-1].parts
    for depth in range(len(levels) - 1, -1, -1):
        lv = levels[depth]
        if deadline is not None and time.perf_counter() >= deadline:
            report["levels"].append(dict(level=depth, vertices=lv.cn.n, nets=lv.cn.m,
                                         skipped="deadline"))
            if depth > 0:
                p = p[lv.cluster]
            continue
        t = time.perf_counter()
        p, r = refine_max_send(lv.cn, lv.loads, p, k, cap, seed=seed + depth, **refine_options)
        report["levels"].append(dict(
            level=depth, vertices=lv.cn.n, nets=lv.cn.m,
            start=r["start"], end=r["end"],
            score_before=r["start"]["max_send"] + r["start"]["total"] / k,
            score_after=r["end"]["max_send"] + r["end"]["total"] / k,
            seconds=round(time.perf_counter() - t, 3)))
        if depth > 0:
            p = p[lv.cluster]  # project down: each fine vertex takes its cluster's part
    report["seconds"] = round(time.perf_counter() - t0, 3)
    return p, report
