"""Incremental refinement state and its kernels: build, move, best move.

Per net a compact connectivity set of (part, pin count) slots, at most min(k, |net|) of
them; a move updates the sets, the send volume and load of the parts, the total volume and
the send penalty. Arrays travel in named tuples (numba unpacks them at no cost):

* ``Graph``: the column-net hypergraph, vertex loads and the slot offsets (read only);
* ``State``: part vector, connectivity sets, send ``S``, load ``L``, ``tot`` = (total
  volume, penalty) (updated by every move);
* ``Work``: per-part scratch of ``best_move`` and per-vertex marks of the FM pass.

``T`` = (threshold, quadratic scale) of the send penalty (see ``hinge``), and the limit on
the total volume that no accepted move crosses (``passes``; infinite by default).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ...runtime.jit import njit
from ..model import ColumnNet


class Graph(NamedTuple):
    """Column-net hypergraph (see ``ColumnNet``), vertex loads ``w``, slot offsets ``sptr``."""

    vptr: np.ndarray
    vnets: np.ndarray
    nptr: np.ndarray
    npins: np.ndarray
    owner: np.ndarray
    optr: np.ndarray
    onets: np.ndarray
    w: np.ndarray
    sptr: np.ndarray


class State(NamedTuple):
    """Part vector; connectivity set of net c: ``lam[c]`` slots (``cpart``, ``ccnt``) from
    ``sptr[c]``; send ``S`` and load ``L`` per part; ``tot`` = (total volume, penalty)."""

    part: np.ndarray
    lam: np.ndarray
    cpart: np.ndarray
    ccnt: np.ndarray
    S: np.ndarray
    L: np.ndarray
    tot: np.ndarray


class Work(NamedTuple):
    """Scratch: per part (``Mw``, ``own``, ``mark``, ``touched``), per vertex (FM ``locked``,
    ``stamp``)."""

    Mw: np.ndarray
    own: np.ndarray
    mark: np.ndarray
    touched: np.ndarray
    locked: np.ndarray
    stamp: np.ndarray


def make_graph(hg: ColumnNet, w: np.ndarray, k: int) -> Graph:
    sptr = np.zeros(hg.m + 1, dtype=np.int64)
    np.cumsum(np.minimum(hg.net_sizes(), k), out=sptr[1:])
    return Graph(hg.vptr, hg.vnets, hg.nptr, hg.npins, hg.owner, hg.optr, hg.onets, w, sptr)


def make_state(g: Graph, part: np.ndarray, k: int, T: np.ndarray) -> State:
    """State of ``part`` (copied), built from scratch."""
    slots = int(g.sptr[-1])
    part = part.astype(np.int64).copy()
    s = State(part, np.zeros(g.sptr.size - 1, dtype=np.int64),
              np.zeros(slots, dtype=np.int64), np.zeros(slots, dtype=np.int64),
              np.zeros(k, dtype=np.int64),
              np.bincount(part, weights=g.w, minlength=k).astype(np.int64),
              np.zeros(2, dtype=np.float64))
    build(g, s, T)
    return s


def make_targets(total_limit: float | None = None) -> np.ndarray:
    """``T`` before the first ``retarget``: no send penalty, the total volume limit."""
    return np.array([0.0, 0.0, np.inf if total_limit is None else float(total_limit)])


def make_work(k: int, n: int) -> Work:
    return Work(np.zeros(k, dtype=np.float64), np.zeros(k, dtype=np.int64),
                np.zeros(k, dtype=np.int64), np.zeros(k, dtype=np.int64),
                np.zeros(n, dtype=np.int8), np.zeros(n, dtype=np.int64))


@njit(cache=True, nogil=True)
def hinge(s, T):
    """Send penalty of a part: e + q e^2 for the excess e = s - T[0] > 0 (q = T[1])."""
    e = s - T[0]
    return e + T[1] * e * e if e > 0 else 0.0


@njit(cache=True, nogil=True)
def slope(s, T):
    """Marginal penalty of one more unit of send at s (the weight of a net owned there)."""
    e = s - T[0]
    return 1.0 + 2.0 * T[1] * e if e > 0 else 0.0


@njit(cache=True, nogil=True)
def penalty(S, T):
    h = 0.0
    for p in range(S.size):
        h += hinge(S[p], T)
    return h


@njit(cache=True, nogil=True)
def build(g, s, T):
    """Connectivity sets of all nets, send volumes, total volume and penalty from scratch."""
    S, cpart, ccnt = s.S, s.cpart, s.ccnt
    for p in range(S.size):
        S[p] = 0
    tv = 0
    for c in range(g.nptr.size - 1):
        lo = g.sptr[c]
        m = 0
        for j in range(g.nptr[c], g.nptr[c + 1]):
            p = s.part[g.npins[j]]
            found = False
            for i in range(lo, lo + m):
                if cpart[i] == p:
                    ccnt[i] += 1
                    found = True
                    break
            if not found:
                cpart[lo + m] = p
                ccnt[lo + m] = 1
                m += 1
        s.lam[c] = m
        S[s.part[g.owner[c]]] += m - 1
        tv += m - 1
    s.tot[0] = tv
    s.tot[1] = penalty(S, T)


@njit(cache=True, nogil=True)
def add_send(p, d, s, T):
    old = s.S[p]
    s.S[p] = old + d
    s.tot[1] += hinge(s.S[p], T) - hinge(old, T)


@njit(cache=True, nogil=True)
def move(v, b, g, s, T):
    """Move vertex v to part b, updating connectivity sets, send, load, total and penalty."""
    part, lam, cpart, ccnt, tot = s.part, s.lam, s.cpart, s.ccnt, s.tot
    a = part[v]
    if a == b:
        return
    for j in range(g.optr[v], g.optr[v + 1]):
        add_send(a, -(lam[g.onets[j]] - 1), s, T)
    for j in range(g.vptr[v], g.vptr[v + 1]):
        c = g.vnets[j]
        o = g.owner[c]
        lo = g.sptr[c]
        hi = lo + lam[c]
        for i in range(lo, hi):
            if cpart[i] == a:
                ccnt[i] -= 1
                if ccnt[i] == 0:
                    cpart[i] = cpart[hi - 1]
                    ccnt[i] = ccnt[hi - 1]
                    lam[c] -= 1
                    hi -= 1
                    tot[0] -= 1
                    if o != v:
                        add_send(part[o], -1, s, T)
                break
        found = False
        for i in range(lo, hi):
            if cpart[i] == b:
                ccnt[i] += 1
                found = True
                break
        if not found:
            cpart[hi] = b
            ccnt[hi] = 1
            lam[c] += 1
            tot[0] += 1
            if o != v:
                add_send(part[o], 1, s, T)
    part[v] = b
    for j in range(g.optr[v], g.optr[v + 1]):
        add_send(b, lam[g.onets[j]] - 1, s, T)
    s.L[a] -= g.w[v]
    s.L[b] += g.w[v]


@njit(cache=True, nogil=True)
def _touch(q, work, nt):
    """Add part q to the candidate targets (once); returns the new count."""
    if work.mark[q] == 0:
        work.mark[q] = 1
        work.Mw[q] = 0.0
        work.touched[nt] = q
        nt += 1
    return nt


@njit(cache=True, nogil=True)
def best_move(v, g, s, T, cap, mu, work, any_part):
    """Best target part of v by (approximate) gain in Phi; (-1, -inf) if none is feasible.

    Target b is feasible when ``L[b] + w[v] <= cap`` (the load cap). With ``any_part`` the
    least loaded part is a candidate even when none of v's nets touch it (rebalancing). Nets
    v owns count exactly (their whole send moves from a to b); the others by their owner's
    marginal penalty. Returns (b, gain); gain > 0 means Phi goes down.
    """
    part, lam, cpart, ccnt, S, L = s.part, s.lam, s.cpart, s.ccnt, s.S, s.L
    Mw, own, mark = work.Mw, work.own, work.mark
    a = part[v]
    nt = 0
    lam_own = 0
    a1 = 0
    m_own = g.optr[v + 1] - g.optr[v]
    for j in range(g.optr[v], g.optr[v + 1]):
        c = g.onets[j]
        lam_own += lam[c]
        lo = g.sptr[c]
        for i in range(lo, lo + lam[c]):
            q = cpart[i]
            if q == a:
                if ccnt[i] == 1:
                    a1 += 1
            else:
                nt = _touch(q, work, nt)
                own[q] += 1
    base = 0.0
    for j in range(g.vptr[v], g.vptr[v + 1]):
        c = g.vnets[j]
        o = g.owner[c]
        if o == v:
            continue
        wc = 1.0 + mu * slope(S[part[o]], T)
        lo = g.sptr[c]
        for i in range(lo, lo + lam[c]):
            q = cpart[i]
            if q == a:
                if ccnt[i] == 1:
                    base += wc
            else:
                nt = _touch(q, work, nt)
                Mw[q] += wc
        base -= wc
    if any_part:
        q = np.argmin(L)
        if q != a:
            nt = _touch(q, work, nt)
    best = -1
    bestg = -np.inf
    bestl = 0
    ha = hinge(S[a], T) - hinge(S[a] - (lam_own - m_own), T)
    for t in range(nt):
        q = work.touched[t]
        mark[q] = 0
        inown = own[q]
        own[q] = 0
        if L[q] + g.w[v] > cap:
            continue
        g_q = base + Mw[q] + a1 - (m_own - inown)
        if mu > 0.0:
            g_q += mu * (ha + hinge(S[q], T) - hinge(S[q] + lam_own - a1 - inown, T))
        if g_q > bestg or (g_q == bestg and L[q] < bestl):
            best = q
            bestg = g_q
            bestl = L[q]
    return best, bestg
