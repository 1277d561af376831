"""Refinement passes (numba): rebalance, label propagation, localized FM.

Each pass minimizes Phi = total volume + mu * penalty under the load cap ``cap`` and the
total volume limit ``T[2]`` (a move may not take the total above it, or above the total
where the pass started if that is higher); the arrays come grouped as in ``state`` (``g``
graph, ``s`` state, ``work`` scratch).
"""

from __future__ import annotations

import heapq
from typing import NamedTuple

import numpy as np

from ...runtime.jit import njit
from .state import best_move, move


class FMLimits(NamedTuple):
    """Bounds of a localized FM pass (see ``fm_pass``)."""

    max_net: int = 64
    max_push: int = 16
    max_fruitless: int = 25
    max_moves: int = 1000
    per_move: bool = True


@njit(cache=True, nogil=True)
def rebalance(g, s, T, work, cap, mu, max_sweeps, max_w):
    """Move vertices out of parts above the load cap, best gain (then lightest) first; only
    vertices of load at most ``max_w`` are candidates (a hub's gain reads every net it is
    in: on R-MAT graphs the hubs took minutes of gains for moves light vertices make)."""
    part, L, w = s.part, s.L, g.w
    n = part.size
    for _ in range(max_sweeps):
        over = 0
        for p in range(L.size):
            if L[p] > cap:
                over += 1
        if over == 0:
            return True
        cand = np.empty(n, dtype=np.int64)
        score = np.empty(n, dtype=np.float64)
        m = 0
        for v in range(n):
            if L[part[v]] > cap and 0 < w[v] <= max_w:
                b, gain = best_move(v, g, s, T, cap, mu, work, True)
                if b >= 0:
                    cand[m] = v
                    score[m] = gain - 1e-9 * w[v]
                    m += 1
        if m == 0:
            return False
        order = np.argsort(-score[:m])
        moved = 0
        for t in range(m):
            v = cand[order[t]]
            if L[part[v]] <= cap:
                continue
            b, gain = best_move(v, g, s, T, cap, mu, work, True)
            if b >= 0:
                move(v, b, g, s, T)
                moved += 1
        if moved == 0:
            return False
    for p in range(L.size):
        if L[p] > cap:
            return False
    return True


@njit(cache=True, nogil=True)
def lp_round(order, g, s, T, work, cap, mu):
    """One label-propagation round: each vertex moves to its best feasible part if Phi drops
    (checked exactly after the move, undone otherwise). Returns the number of moves."""
    tot = s.tot
    limit = max(T[2], tot[0])
    moved = 0
    for v in order:
        b, gain = best_move(v, g, s, T, cap, mu, work, False)
        if b >= 0 and gain > 1e-9:
            before = tot[0] + mu * tot[1]
            a = s.part[v]
            move(v, b, g, s, T)
            if tot[0] + mu * tot[1] > before - 1e-9 or tot[0] > limit + 1e-9:
                move(v, a, g, s, T)
            else:
                moved += 1
    return moved


@njit(cache=True, nogil=True)
def _push_neighbours(v, a, b, g, s, T, work, cap, mu, lim, heap, clock, stats):
    """Queue the best moves of v's neighbours through nets whose pin counts in a or b
    crossed 0/1/2 (the others' gains did not change); at most ``max_push`` of them."""
    pushed = 0
    for j in range(g.vptr[v], g.vptr[v + 1]):
        c = g.vnets[j]
        if g.nptr[c + 1] - g.nptr[c] > lim.max_net or pushed >= lim.max_push:
            continue
        ca = 0
        cb = 0
        for i in range(g.sptr[c], g.sptr[c] + s.lam[c]):
            if s.cpart[i] == a:
                ca = s.ccnt[i]
            elif s.cpart[i] == b:
                cb = s.ccnt[i]
        if ca > 1 and cb > 2:
            continue
        for i in range(g.nptr[c], g.nptr[c + 1]):
            u = g.npins[i]
            if (work.locked[u] or work.stamp[u] == clock
                    or g.vptr[u + 1] - g.vptr[u] > lim.max_net):
                continue
            work.stamp[u] = clock
            stats[6] += g.vptr[u + 1] - g.vptr[u]
            bu, gu = best_move(u, g, s, T, cap, mu, work, False)
            pushed += 1
            stats[2] += 1
            if bu >= 0:
                heapq.heappush(heap, (-gu, u, bu))


@njit(cache=True, nogil=True)
def fm_pass(seeds, g, s, T, work, cap, mu, lim, stats, unlock=True, max_work=-1):
    """Localized FM: from each unlocked seed, repeatedly apply the best move in a priority
    queue of the seed's growing neighbourhood, negative gains included, each vertex at most
    once per pass; then roll back to the lowest Phi seen. The neighbourhood grows through nets
    of at most ``max_net`` pins and skips vertices in more than ``max_net`` nets (hubs: they
    sit in nearly every small net and cost a full scan each). A prefix whose total is above
    the limit is never kept. ``stats`` += (pops, moves, evaluations, undone, searches);
    ``stats[5]`` carries the stamp clock and ``stats[6]`` counts the work (nets scanned by
    the moves evaluated), so a pass can run as several calls: with ``max_work`` >= 0 the
    call returns once ``stats[6]`` reaches it (between two searches) and ``stats[7]`` is the
    index of the next seed; ``unlock=False`` keeps the moved vertices locked for the next
    call (the caller clears ``work.locked`` after the last). Returns the decrease of Phi."""
    tot, locked = s.tot, work.locked
    limit = max(T[2], tot[0])
    log_v = np.empty(lim.max_moves, dtype=np.int64)
    log_a = np.empty(lim.max_moves, dtype=np.int64)
    locked_list = np.empty(s.part.size, dtype=np.int64)
    nlocked = 0
    start_phi = tot[0] + mu * tot[1]
    heap = [(0.0, np.int64(0), np.int64(0))]
    heap.pop()
    clock = stats[5]
    stats[7] = seeds.size
    for si in range(seeds.size):
        if max_work >= 0 and stats[6] >= max_work:
            stats[7] = si
            break
        seed = seeds[si]
        if locked[seed]:
            continue
        stats[6] += g.vptr[seed + 1] - g.vptr[seed]
        b, gain = best_move(seed, g, s, T, cap, mu, work, False)
        if b < 0:
            continue
        heap.clear()
        heapq.heappush(heap, (-gain, seed, b))
        clock += 1
        work.stamp[seed] = clock
        best_phi = tot[0] + mu * tot[1]
        nmoves = 0
        best_prefix = 0
        fruitless = 0
        repush = 0
        while len(heap) > 0 and fruitless < lim.max_fruitless and nmoves < lim.max_moves:
            negg, v, b = heapq.heappop(heap)
            stats[0] += 1
            if locked[v]:
                continue
            stats[6] += g.vptr[v + 1] - g.vptr[v]
            b2, g2 = best_move(v, g, s, T, cap, mu, work, False)
            if b2 < 0:
                continue
            if g2 < -negg - 1e-9 and repush < 8 and len(heap) > 0 and -g2 > heap[0][0]:
                heapq.heappush(heap, (-g2, v, b2))  # stale and no longer the best: requeue
                repush += 1
                continue
            repush = 0
            a = s.part[v]
            stats[1] += 1
            move(v, b2, g, s, T)
            locked[v] = 1
            locked_list[nlocked] = v
            nlocked += 1
            log_v[nmoves] = v
            log_a[nmoves] = a
            nmoves += 1
            phi = tot[0] + mu * tot[1]
            if phi < best_phi - 1e-9 and tot[0] <= limit + 1e-9:
                best_phi = phi
                best_prefix = nmoves
                fruitless = 0
            else:
                fruitless += 1
            if lim.per_move:
                clock += 1  # neighbours may re-enter the queue after every move
            _push_neighbours(v, a, b2, g, s, T, work, cap, mu, lim, heap, clock, stats)
        stats[3] += nmoves - best_prefix
        stats[4] += 1
        for t in range(nmoves - 1, best_prefix - 1, -1):
            move(log_v[t], log_a[t], g, s, T)
    stats[5] = clock
    if unlock:
        for t in range(nlocked):
            locked[locked_list[t]] = 0
    return start_phi - (tot[0] + mu * tot[1])
