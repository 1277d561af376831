"""The refinement driver: ``refine_max_send`` (phase 1 total volume, phase 2 the send-penalty
schedule, best state kept), ``rebalance``, and the options of the refinement."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..model import ColumnNet
from . import passes
from .state import make_graph, make_state, make_targets, make_work, penalty

# send-penalty weights of phase 2, in turn; the first ones are small because on Mt-KaHyPar's
# partitions a single label-propagation round at mu = 0.05 already spends 2.5 % of total
# volume (Debian dependencies, k = 16)
MU_SCHEDULE = (0.01, 0.02, 0.05, 0.1, 0.2, 0.4, 1.0)
# the rebalance's first candidates: vertices of load at most this many times the mean
LIGHT = 8
# under a deadline, a pass checks it after every LP_SLICE vertices of a label-propagation
# round and after about FM_WORK nets scanned by an FM pass (one pass over the 1,347-vertex
# web of trust at k = 64 took 1.9 s on a loaded machine: a deadline checked between passes
# or seed slices overran by that much)
LP_SLICE, FM_WORK = 8192, 200_000


@dataclass(frozen=True)
class MaxSendOptions:
    """Options of ``refine_max_send`` (see its docstring)."""

    mu: float | tuple[float, ...] = MU_SCHEDULE
    delta: float = 0.01
    gamma: float = 0.02
    volume_cap: int | None = None
    volume_slack: float = 0.1
    total_limit: float | None = None  # no returned state has a larger total volume
    lp_rounds: int = 8
    fm_passes: int = 1
    mu_fm_passes: int = 1
    min_gain: float = 3e-3
    fm_push: int = 32
    fm_fruitless: int = 50
    total_lp_rounds: int | None = None
    select: str = "score"
    seed: int = 0
    deadline: float | None = None  # time.perf_counter() after which no pass starts

    def expired(self) -> bool:
        return self.deadline is not None and time.perf_counter() >= self.deadline

    def __post_init__(self):
        if self.select not in ("score", "max_send"):
            raise ValueError(f"select must be 'score' or 'max_send', got {self.select!r}")

    @property
    def mus(self) -> tuple[float, ...]:
        mu = self.mu
        return tuple(float(m) for m in (mu if isinstance(mu, (tuple, list)) else (mu,)))


class Refinement:
    """A partition under refinement: its arrays (``state``) and the passes over them."""

    def __init__(self, hg: ColumnNet, w: np.ndarray, part: np.ndarray, k: int, T: np.ndarray):
        if T.shape != (3,):  # the kernels read T[2] unchecked
            raise ValueError(f"T must be (threshold, scale, total limit), got shape {T.shape}")
        self.k, self.T = k, T
        self.graph = make_graph(hg, w, k)
        self.state = make_state(self.graph, part, k, T)
        self.work = make_work(k, hg.n)
        self.fm_stats = np.zeros(5, dtype=np.int64)

    part = property(lambda self: self.state.part)
    S = property(lambda self: self.state.S, doc="send volume per part")
    L = property(lambda self: self.state.L, doc="load per part")
    tot = property(lambda self: self.state.tot, doc="(total volume, send penalty)")

    @property
    def total(self) -> int:
        return int(round(self.tot[0]))

    @property
    def max_send(self) -> int:
        return int(self.S.max()) if self.k else 0

    @property
    def key(self) -> tuple[int, int]:
        return self.max_send, self.total

    def phi(self, mu: float) -> float:
        return float(self.tot[0] + mu * self.tot[1])

    def retarget(self, delta: float, gamma: float) -> None:
        """T = (1 + delta) x average send; quadratic scale gamma x average (0: linear)."""
        avg = self.tot[0] / self.k
        self.T[0] = (1.0 + delta) * avg
        self.T[1] = 1.0 / (2.0 * gamma * avg) if gamma > 0 and avg > 0 else 0.0
        self.tot[1] = penalty(self.S, self.T)

    def lp_round(self, cap: int, mu: float, rng: np.random.Generator,
                 expired: Callable[[], bool] | None = None) -> int:
        """One label-propagation round. With ``expired``, the vertices go in slices of
        ``LP_SLICE`` and the round stops after the slice during which ``expired()`` turned
        true (the same moves as one call otherwise: each vertex is visited on its own)."""
        order = rng.permutation(self.part.size)
        step = order.size if expired is None else LP_SLICE
        moved = 0
        for lo in range(0, max(order.size, 1), step):
            moved += int(passes.lp_round(order[lo:lo + step], self.graph, self.state, self.T,
                                         self.work, cap, mu))
            if expired is not None and expired():
                break
        return moved

    def fm_pass(self, cap: int, mu: float, rng: np.random.Generator,
                limits: passes.FMLimits | None = None,
                expired: Callable[[], bool] | None = None) -> float:
        """One FM pass over every vertex as a seed. With ``expired``, the pass runs in calls
        of about ``FM_WORK`` nets scanned each and stops after the call during which
        ``expired()`` turned true (the same moves as one call otherwise)."""
        self.work.stamp[:] = 0
        seeds = rng.permutation(self.part.size)
        # pops, moves, evaluations, undone, searches; the stamp clock, work, next seed
        self.fm_stats = np.zeros(8, dtype=np.int64)
        lim = limits or passes.FMLimits()
        if expired is None:
            return float(passes.fm_pass(seeds, self.graph, self.state, self.T, self.work, cap,
                                        mu, lim, self.fm_stats))
        gain, start = 0.0, 0
        while start < seeds.size:
            gain += float(passes.fm_pass(seeds[start:], self.graph, self.state, self.T,
                                         self.work, cap, mu, lim, self.fm_stats, False,
                                         self.fm_stats[6] + FM_WORK))
            start += int(self.fm_stats[7])
            if expired():
                break
        self.work.locked[:] = 0
        return gain

    def rebalance(self, cap: int, mu: float) -> bool:
        """Loads under ``cap``: light vertices (load at most ``LIGHT`` times the mean) move
        first, then any vertex if that was not enough."""
        w = self.graph.w
        light = LIGHT * -(-int(w.sum()) // max(w.size, 1))
        return bool(passes.rebalance(self.graph, self.state, self.T, self.work, cap, mu, 50,
                                     light)
                    or passes.rebalance(self.graph, self.state, self.T, self.work, cap, mu,
                                        50, np.iinfo(np.int64).max))


class _Best:
    """The best state offered so far: balanced, max send not above ``send_cap`` (the
    input's), total within ``limit``; ranked by ``max send + total / k`` ("score") or by
    (max send, total) ("max_send")."""

    def __init__(self, st: Refinement, select: str):
        self.st, self.select = st, select
        self.key, self.parts, self.limit = st.key, st.part.copy(), np.inf
        self.send_cap = st.max_send

    def rank(self, key: tuple[int, int]) -> tuple:
        return (key[0] + key[1] / self.st.k, key[0]) if self.select == "score" else key

    def offer(self) -> None:
        st = self.st
        if (st.total <= self.limit and st.max_send <= self.send_cap
                and self.rank(st.key) < self.rank(self.key)):
            self.key, self.parts = st.key, st.part.copy()


def _phase(st: Refinement, opt: MaxSendOptions, rng: np.random.Generator, history: list,
           best: _Best | None, mu: float, cap: int, rounds: int, passes_: int) -> None:
    """Label-propagation rounds, then FM passes, each kind until a step gains less than
    ``min_gain`` (relative) or moves nothing; each state is offered to ``best`` if given."""
    limits = passes.FMLimits(max_push=opt.fm_push, max_fruitless=opt.fm_fruitless)
    for kind, count in (("lp", rounds), ("fm", passes_)):
        for _ in range(count):
            if opt.expired():
                return
            t0 = time.perf_counter()
            st.retarget(opt.delta, opt.gamma)
            phi0 = st.phi(mu)
            if kind == "lp":
                moved = st.lp_round(cap, mu, rng, opt.expired if opt.deadline else None)
            else:
                st.fm_pass(cap, mu, rng, limits, opt.expired if opt.deadline else None)
                moved = int(st.fm_stats[1] - st.fm_stats[3])
            history.append(dict(kind=kind, mu=mu, total=st.total, max_send=st.max_send,
                                moved=moved, seconds=round(time.perf_counter() - t0, 3)))
            if best is not None:
                best.offer()
            if moved == 0 or phi0 - st.phi(mu) < opt.min_gain * max(phi0, 1.0):
                break


def refine_max_send(cn: ColumnNet, loads: np.ndarray, parts: np.ndarray, k: int, cap: int,
                    options: MaxSendOptions | None = None,
                    **overrides) -> tuple[np.ndarray, dict]:
    """Refine ``parts`` (k parts, loads capped at ``cap``) to lower the maximum send volume.

    ``options`` (default ``MaxSendOptions()``), with any field overridden by keyword.
    Phase 1 minimizes the total volume alone under ``volume_cap`` (a tighter cap, which
    leaves load slack for phase 2; ``total_lp_rounds`` label-propagation rounds, default
    ``lp_rounds``, then ``fm_passes`` FM passes); phase 2 minimizes Phi under ``cap``, whose
    send penalty of part p is ``e + e^2 / (2 gamma avg)`` for its excess
    ``e = send_p - (1 + delta) avg``, for each weight of the increasing ``mu`` schedule in
    turn (continuation: a small weight moves only the vertices whose send relief is cheap in
    total volume, a larger one then pushes the remaining excess; measured on WordNet at
    k = 64, a single mu = 1 cuts the max send by 34 % but raises the total by 7.5 %, mu = 0.1
    cuts 27 % for 1.5 %). Each weight runs label-propagation rounds, then ``mu_fm_passes``
    FM passes, each until it gains less than ``min_gain`` (relative); the schedule stops
    once the total leaves the allowed slack. ``mu = 0`` makes the stage a plain
    total-volume refinement. Returns the best state seen among balanced states whose max send
    is not above the input's and whose total is within ``volume_slack`` of the lowest total
    before phase 2 and not above ``total_limit`` (rows; ``quality`` passes 1.02x the lowest
    base partition's total), and a report dict; the input itself is kept if no refined state
    qualifies. "Best" is the lowest ``max send + total / k`` (the
    bottleneck plus the average send, the score ``partition`` ranks methods by) with
    ``select="score"``, or the lowest max send, then total, with ``select="max_send"``.
    With a ``deadline`` no round or pass starts after it (a running one finishes), so a
    time budget bounds the refinement; the result is still the best state seen.
    """
    opt = dataclasses.replace(options or MaxSendOptions(), **overrides)
    mus = opt.mus
    st = Refinement(cn, loads.astype(np.int64), parts, k, make_targets(opt.total_limit))
    rng = np.random.default_rng(opt.seed)
    start = dict(total=st.total, max_send=st.max_send, max_load=int(st.L.max()))
    history: list[dict] = []
    balanced = st.rebalance(cap, max(mus, default=0.0))  # a no-op for a balanced input
    best = _Best(st, opt.select)
    mus = tuple(m for m in mus if m > 0)
    tight = cap if opt.volume_cap is None or not mus else min(cap, int(opt.volume_cap))
    if tight < cap:  # leave load slack for phase 2
        st.rebalance(tight, 0.0)
    _phase(st, opt, rng, history, None, 0.0, tight,
           opt.lp_rounds if opt.total_lp_rounds is None else opt.total_lp_rounds,
           opt.fm_passes)
    best.limit = np.inf if not mus else min(best.key[1], st.total) * (1.0 + opt.volume_slack)
    if opt.total_limit is not None:
        best.limit = min(best.limit, float(opt.total_limit))
    best.offer()
    for m in mus:
        _phase(st, opt, rng, history, best, m, cap, opt.lp_rounds, opt.mu_fm_passes)
        if st.total > best.limit:  # a larger weight only trades more total volume
            break
    report = dict(start=start, balanced=balanced, rounds=len(history), history=history,
                  end=dict(total=int(best.key[1]), max_send=int(best.key[0])))
    return best.parts, report


def rebalance(cn: ColumnNet, loads: np.ndarray, parts: np.ndarray, k: int,
              cap: int) -> tuple[np.ndarray, bool]:
    """Move vertices out of parts whose load exceeds ``cap`` at the least total-volume cost
    (a no-op for a balanced partition). Returns (parts, whether every load is now <= cap)."""
    L = np.bincount(parts, weights=loads, minlength=k)
    if L.size == 0 or L.max() <= cap:
        return parts, True
    st = Refinement(cn, loads.astype(np.int64), parts, k, make_targets())
    ok = st.rebalance(cap, 0.0)
    return st.part, ok
