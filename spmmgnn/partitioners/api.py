"""``partition(A, k, method=...)``: one entry point for every partitioner.

A method is a base partitioner, optionally followed by ``+maxsend`` (the max-send-volume
refinement of ``maxsend``), e.g. ``metis-vol+maxsend``:

* ``block``, ``random`` (``simple``); ``metis-cut``, ``metis-vol`` (METIS k-way with the
  edge-cut / communication-volume objective); ``metis`` runs both objectives and keeps the
  better result; ``kaminpar`` (KaMinPar on the symmetrized graph); ``kahypar``,
  ``mtkahypar`` (column-net hypergraph; ``mtkahypar-fast``: Mt-KaHyPar's default preset,
  not reproducible with more than one thread).
* ``+maxsend``: ``refine_max_send`` starts from the base partition (same epsilon) and
  lowers the total and the maximum send volume, keeping the state of lowest
  ``max send + total / k`` with the total within 10 % of its total-volume phase. It never
  returns a higher maximum send than the base partition's.
* ``+multilevel``: the same refinement at every level of a hierarchy coarsened inside the
  base partition's parts (``multilevel.refine_multilevel``), coarsest first, so a whole
  cluster can move; never worse than its input by ``max send + total / k``.

Two presets keep the best of several candidates:

* ``default`` (fast): within max(3x METIS-vol's time, 2 s) (``budget``; ``_default``):
  METIS-vol, then KaMinPar and
  Mt-KaHyPar's fast preset as ``budget.plan_step`` allows, the label-propagation multilevel
  refinement of each base, best base first, and the full refinement of the best with the
  time left, all under the budget's deadline (checked inside the refinement's passes and
  between its levels); the steps skipped are listed with why. Without ``threads`` its
  threaded bases get one thread per idle core (``threads_for_load``). From
  ``estimate.KAMINPAR_ONLY_NNZ`` non-zeros on it is KaMinPar alone;
* ``quality``: the lowest max send at a near-minimum total volume. It computes both bases
  (METIS-vol and Mt-KaHyPar, on every graph), refines each with ``default``'s multilevel
  refinement, then, while ``time_budget`` seconds last (default ``QUALITY_BUDGET`` times
  METIS-vol's time, at least ``QUALITY_MIN_BUDGET``), again with the deep multilevel
  refinement (``QUALITY_LEVELS`` levels, the full refinement at every level), the base of
  lower total volume first each time. Every refinement keeps the total within
  ``QUALITY_TOTAL`` (1.02) times the lower of the two bases' totals (``total_limit``: no
  move crosses it), and the result is the best candidate within that limit (the lower
  base's candidate always is). So ``quality`` can have a higher ``max send + total / k``
  than ``default``, whose total is not bounded. The budget is checked before each
  candidate starts, and a deep refinement stops starting passes when it runs out (it keeps
  the best state so far); a base partitioner that has started is not interrupted, so the
  preset can overrun by about one base's time.

"Better" is the lower ``max send + total / k`` (the bottleneck plus the average send). Every
result is checked against the load cap (``model.load_cap``) and rebalanced if a base
partitioner overshot it, so all methods keep the load imbalance <= epsilon when possible.

Graph methods (``metis*``, ``kaminpar``) symmetrize a directed A; the hypergraph methods
(``kahypar``, ``mtkahypar``) and the refinement model the exact volume of any A.

The presets come from ``bench/partition.py`` on real graphs
(``bench/results/partition_real.md``, Debian data: lexical, software, web, meshes). A
degree-skew
rule cannot pick one method: Mt-KaHyPar has the lower total on the web graph (hub-heavy)
and on the meshes (no hubs) alike. ``Partition.method`` names the winner and
``Partition.candidates`` lists each candidate's volumes and seconds.
"""

from __future__ import annotations

import importlib.util
import math
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from ..layout import Partition
from ..runtime.errors import SpmmgnnError
from .budget import BASES_MAX_N, default_budget, plan_step, run_until
from .estimate import KAMINPAR_ONLY_NNZ, SAY_AFTER, check_estimate, estimate, resolve
from .hypergraph import kahypar_parts, mtkahypar_parts
from .kaminpar import kaminpar_parts
from .maxsend import rebalance, refine_max_send
from .methods import (  # noqa: F401 (the names callers import from here)
    BASE_METHODS,
    CONTIGUOUS,
    DEFAULT_METHOD,
    LARGE_GRAPH,
    LARGE_GRAPH_REFINEMENT,
    METHODS,
    METIS_CANDIDATE,
    MTKAHYPAR_CANDIDATE,
    MULTILEVEL,
    PRESETS,
    QUALITY_BUDGET,
    QUALITY_LEVELS,
    QUALITY_METHOD,
    QUALITY_MIN_BUDGET,
    QUALITY_TOTAL,
    REFINEMENT,
    REFINEMENTS,
    ROW_WEIGHT_GCN,
    ROW_WEIGHT_MAX,
    _check_non_negative,
    check_row_weight,
    check_row_weight_use,
    default_threads,
    parse_method,
    score,
    threads_for_load,
)
from .metis import metis_parts
from .metrics import metrics
from .model import ColumnNet, as_square_csr, load_cap, row_loads
from .multilevel import refine_multilevel
from .simple import block_parts, random_parts
from .twolevel import is_two_level, two_level


def _base_parts(base: str, A, k: int, loads: np.ndarray, cap: int, epsilon: float, seed: int,
                threads: int, net: Callable[[], ColumnNet]) -> np.ndarray:
    if base == "block":
        return block_parts(loads, k, cap)
    if base == "random":
        return random_parts(loads, k, cap, seed)
    if base in ("metis-cut", "metis-vol"):
        return metis_parts(A, k, loads, epsilon, seed, objective=base.split("-")[1])
    if base == "kahypar":
        return kahypar_parts(A, k, loads, epsilon, seed, cn=net())
    if base == "kaminpar":
        return kaminpar_parts(A, k, loads, load_cap(loads, k, epsilon), seed, threads=threads)
    return mtkahypar_parts(A, k, loads, epsilon, seed, threads=threads, cn=net(),
                           preset="default" if base == "mtkahypar-fast" else "deterministic")


def partition(A, k: int, method: str = DEFAULT_METHOD, epsilon: float = 0.03, seed: int = 0,
              threads: int | None = None, time_budget: float | None = None,
              progress: Callable[[str], None] | None = None,
              parts_per_node: int | None = None, row_weight: int = 0,
              **refine_options) -> Partition:
    """Partition the rows of square sparse ``A`` (the matrix the SpMM applies; a ``Graph``
    means its ``adj``) into ``k`` block rows of balanced non-zeros, minimizing the total
    communication volume and, with ``+maxsend``, the maximum send volume.

    Returns a ``Partition`` (part vector, block offsets, permutation) with ``metrics`` and
    ``seconds`` (partitioning time) filled in; ``none`` / ``contiguous`` give the near-equal
    contiguous blocks ``partition=None`` means, with their metrics. ``threads`` is used by
    Mt-KaHyPar and KaMinPar (default: the cores available). ``time_budget`` (seconds; may
    be ``math.inf``) bounds the presets, replacing their time rules (see the module
    docstring). ``progress`` gets a line per step once a partition has taken
    ``PROGRESS_AFTER`` seconds (the command line prints them on stderr). ``refine_options``
    go to ``maxsend.refine_max_send`` (through ``multilevel.refine_multilevel`` for
    ``+multilevel``).
    ``twolevel:<method>`` partitions into nodes of ``parts_per_node`` parts first
    (``twolevel``). ``row_weight``: each vertex weighs its row's non-zeros plus this many
    (``model.row_loads``), so the parts balance rows as well as non-zeros: a GCN step's
    dense part costs per row what ~16 non-zeros cost its SpMMs (``ROW_WEIGHT_GCN``), and
    with 0 a power-law graph's parts can hold several times the average rows
    (docs/partitioning.md, "Rows and non-zeros"). Before any work the method's peak memory
    and seconds are estimated from n and nnz (``estimate``; passed to ``progress`` when it
    expects seconds) and a method that cannot fit in the memory available is refused
    (SpmmgnnError).
    """
    row_weight = check_row_weight(row_weight)
    if is_two_level(method):
        return two_level(A, k, method, parts_per_node, partition, epsilon=epsilon, seed=seed,
                         threads=threads, time_budget=time_budget, progress=progress,
                         row_weight=row_weight, **refine_options)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise SpmmgnnError(f"the number of parts k must be a positive integer, got {k!r}")
    k = int(k)
    _check_non_negative("epsilon", epsilon)
    epsilon = min(float(epsilon), float(k))  # k - 1 already lets one part hold everything
    _check_non_negative("volume_slack", refine_options.get("volume_slack", 0.0))
    if time_budget is not None and time_budget != math.inf:
        _check_non_negative("time_budget", time_budget)
    preset_name = str(method).strip().lower()
    busy_note = ""
    if threads is None and preset_name == DEFAULT_METHOD:
        threads, busy_note = threads_for_load(default_threads())
    threads = default_threads() if threads is None else int(threads)
    if threads < 1:
        raise SpmmgnnError(f"threads must be positive, got {threads}")
    A = as_square_csr(A)
    n = A.shape[0]
    if str(method).strip().lower() in CONTIGUOUS:
        result = Partition.contiguous(n, k)
        result.metrics = metrics(A, result.parts, k)
        return result
    est = estimate(method, n, int(A.nnz), k)
    if progress is not None and est.seconds >= SAY_AFTER:
        progress(f"partition: {est.line()}")
    check_estimate(est, A.data.nbytes + A.indices.nbytes + A.indptr.nbytes)
    if preset_name == DEFAULT_METHOD and resolve(method, int(A.nnz)) != DEFAULT_METHOD:
        method = preset_name = resolve(method, int(A.nnz))
        if progress is not None:
            progress(f"partition default k={k}: {int(A.nnz):,} non-zeros >= "
                     f"{KAMINPAR_ONLY_NNZ:,}: KaMinPar alone (nothing else finishes there)")
    loads = row_loads(A, row_weight)
    preset = str(method).strip().lower()
    preset = preset if preset in PRESETS else None
    base, refine = parse_method(METIS_CANDIDATE if preset else method)
    cap = load_cap(loads, k, epsilon)
    if preset and k > 1 and n > k:
        warm_kernels(loads.dtype)  # numba's first compile is not the preset's time
    t0 = time.perf_counter()
    say = _progress_printer(progress, t0, f"{preset or method} k={k}")
    chosen, candidates, label = None, [], f"{base}+{refine}" if refine else base
    if k == 1 or n == 0:
        parts = np.zeros(n, dtype=np.int64)
    elif n <= k:  # one vertex per part: the only choice that respects the load cap
        parts = (np.random.default_rng(seed).permutation(k)[:n] if base == "random"
                 else np.arange(n, dtype=np.int64))
    else:
        net = _Lazy(lambda: ColumnNet.from_matrix(A))  # only when a step needs it
        # (base, refinement, deep): deep = the multilevel refinement of ``quality``
        if preset == QUALITY_METHOD:  # ordered by base total once the bases have run
            runs = [(b, MULTILEVEL, deep) for deep in (False, True)
                    for b in ("metis-vol", "mtkahypar")]
        elif preset:
            runs = []  # ``_default`` decides its steps as it goes
        else:
            runs = [(b, refine, False) for b in (("metis-cut", "metis-vol") if base == "metis"
                                                 else (base,))]

        def finish(p: np.ndarray, ref: str | None, deep: bool,
                   t_base: float) -> tuple[np.ndarray, float]:
            t = time.perf_counter()
            if ref:
                options = dict(refine_options)
                if n >= LARGE_GRAPH and not deep:  # a few label-propagation rounds only
                    for key, value in LARGE_GRAPH_REFINEMENT.items():
                        options.setdefault(key, value)
                if total_limit is not None:
                    options.setdefault("total_limit", total_limit)
                if ref == MULTILEVEL:
                    if deep:
                        options.setdefault("max_levels", QUALITY_LEVELS)
                        if budget is not None:  # the budget bounds its refinement too
                            options.setdefault("deadline", t0 + budget)
                    p = refine_multilevel(net(), loads, p, k, cap, seed=seed, **options)[0]
                else:
                    p = refine_max_send(net(), loads, p, k, cap, seed=seed, **options)[0]
            else:
                p = _balanced(net, loads, p, k, cap)
            return p, t_base + time.perf_counter() - t

        # with a second thread, METIS-cut's refinement (numba, no GIL) overlaps METIS-vol;
        # every candidate's result is independent of the thread count. Not for ``default``:
        # Mt-KaHyPar uses the threads itself (and holds the GIL), and each candidate's own
        # time is reported
        pool = (ThreadPoolExecutor(1) if threads > 1 and len(runs) > 1 and not preset
                else None)
        bases: dict[str, tuple[np.ndarray, float]] = {}

        def base_of(b: str) -> tuple[np.ndarray, float]:
            """The base partition ``b`` and its seconds, computed once."""
            if b not in bases:
                t = time.perf_counter()
                p = _base_parts(b, A, k, loads, cap, epsilon, seed, threads, net)
                _check_parts(b, p, n, k)
                bases[b] = (p, time.perf_counter() - t)
                say(f"{b} {bases[b][1]:.1f} s")
            return bases[b]

        try:
            futures, budget, total_limit = [], time_budget, None
            guaranteed = len(runs)
            if preset == DEFAULT_METHOD:
                candidates = _default(
                    A, k, loads, cap, net, base_of, bases,
                    lambda b: _base_parts(b, A, k, loads, cap, epsilon, seed, threads, net),
                    t0, time_budget, seed, refine_options, say)
            if preset == QUALITY_METHOD:
                if budget is None:  # METIS-vol's time sets the default
                    budget = max(QUALITY_BUDGET * base_of("metis-vol")[1], QUALITY_MIN_BUDGET)
                totals = {b: metrics(A, base_of(b)[0], k).total_volume
                          for b in ("metis-vol", "mtkahypar")}
                total_limit = QUALITY_TOTAL * min(totals.values())
                # the base of lower total first: the budget may not reach the other
                runs.sort(key=lambda r: (r[2], totals[r[0]]))
                guaranteed = 2
            for i, (b, ref, deep) in enumerate(runs):
                if (i >= guaranteed and budget is not None
                        and time.perf_counter() - t0 >= budget):
                    break  # the budget is spent: no further candidate starts
                p, t = base_of(b)
                futures.append(pool.submit(finish, p, ref, deep, t)
                               if pool and i < len(runs) - 1 else finish(p, ref, deep, t))
            done = [f.result() if isinstance(f, Future) else f for f in futures]
        finally:
            if pool:
                pool.shutdown(cancel_futures=True)
        for (b, ref, deep), (p, secs) in zip(runs, done, strict=False):
            m = metrics(A, p, k)
            candidates.append(dict(method=f"{b}+{ref}" if ref else b, parts=p, metrics=m,
                                   seconds=secs, deep=deep))
            if ref:
                say(f"{candidates[-1]['method']} {secs:.1f} s: total {m.total_volume:,}, "
                    f"max send {m.max_send:,}")
            else:  # the load cap's check (and rebalance) and the metrics: seconds at 10^7
                say(f"{b} under the load cap, metrics: total {m.total_volume:,}, "
                    f"max send {m.max_send:,}")
        ran = [c for c in candidates if "metrics" in c]
        within = [c for c in ran
                  if total_limit is None or c["metrics"].total_volume <= total_limit]
        best = min(within or ran, key=lambda c: score(c["metrics"]))
        chosen, parts = best["metrics"], best["parts"]
        if preset:
            label = best["method"]
    seconds = time.perf_counter() - t0
    result = Partition.from_parts(parts, k, method=label)
    result.metrics = metrics(A, parts, k) if chosen is None else chosen
    result.seconds = seconds
    # what each candidate gave (``default`` and ``metis`` run several), for reports
    result.candidates = [dict(method=c["method"], seconds=c["seconds"],
                              total_volume=c["metrics"].total_volume,
                              max_send=c["metrics"].max_send,
                              **({"levels": QUALITY_LEVELS} if c.get("deep") else {}),
                              **{key: c[key] for key in ("refinement", "skipped") if key in c})
                         if c.get("metrics") else dict(method=c["method"], skipped=c["skipped"],
                                                       seconds=c.get("seconds", 0.0))
                         for c in candidates]
    busy = f" ({busy_note})" if busy_note else ""
    say(f"done in {seconds:.1f} s{busy}: {label}, total {result.metrics.total_volume:,}, "
        f"max send {result.metrics.max_send:,}")
    return result


class _Lazy:
    """A value built on the first call (the column-net hypergraph: several times the matrix
    in memory, and METIS or KaMinPar alone never need it unless a part overshoots the cap)."""

    def __init__(self, make: Callable):
        self.make, self.value, self.lock = make, None, threading.Lock()

    def __call__(self):
        with self.lock:  # ``metis`` refines in two threads
            if self.value is None:
                self.value = self.make()
            return self.value


_WARM: set = set()  # the load dtypes whose kernels this process has compiled or loaded
WARM_N, WARM_K = 3000, 4  # a graph large enough that the refinement coarsens it


def warm_kernels(load_dtype=np.int64) -> None:
    """Run the presets' METIS graph, rebalance, metrics and both multilevel refinements once
    per process on a small random graph, so numba compiles their kernels (or loads them from
    its cache) before a preset starts its clock: on an empty cache the compile takes about 80 CPU-s,
    which is not the partition's time and must not eat ``default``'s budget (1-2 s here
    once cached)."""
    key = np.dtype(load_dtype).str
    if key in _WARM:
        return
    import scipy.sparse as sp

    B = sp.random(WARM_N, WARM_N, density=6 / WARM_N, random_state=0, format="csr")
    A = as_square_csr(B + B.T + sp.eye(WARM_N, format="csr"))
    loads = row_loads(A, 0).astype(load_dtype)
    cap = load_cap(loads, WARM_K, 0.03)
    parts = (np.arange(WARM_N, dtype=np.int64) * 7919) % WARM_K  # scattered: work to do
    if _available("pymetis"):  # METIS-vol's own time sets the budget: its graph's kernels
        parts = metis_parts(A, WARM_K, loads, 0.03)
    net = ColumnNet.from_matrix(A)
    metrics(A, rebalance(net, loads, parts, WARM_K, cap)[0], WARM_K)
    for options in ({}, LARGE_GRAPH_REFINEMENT):
        refine_multilevel(net, loads, parts, WARM_K, cap, seed=0, **options)
    _WARM.add(key)


def _balanced(net: Callable[[], ColumnNet], loads: np.ndarray, p: np.ndarray, k: int,
              cap: int) -> np.ndarray:
    """``p``, rebalanced under the load cap if a part overshoots it."""
    if np.bincount(p, weights=loads, minlength=k).max(initial=0) <= cap:
        return p
    return rebalance(net(), loads, p, k, cap)[0]


def _check_parts(name: str, p: np.ndarray, n: int, k: int) -> None:
    if p.shape != (n,) or (n and (p.min() < 0 or p.max() >= k)):
        raise SpmmgnnError(f"{name} returned an invalid part vector")


# seconds after which ``partition`` reports its steps to ``progress``
PROGRESS_AFTER = 3.0


def stderr_progress(line: str) -> None:
    """``progress`` for the command line: the line on stderr, at once."""
    print(line, file=sys.stderr, flush=True)


def _progress_printer(progress: Callable[[str], None] | None, t0: float,
                      what: str) -> Callable[[str], None]:
    """``say(text)``: passes "partition <what>: <text> (<elapsed> s)" to ``progress`` once
    ``PROGRESS_AFTER`` seconds have passed since ``t0`` (quick partitions stay silent)."""
    def say(text: str) -> None:
        elapsed = time.perf_counter() - t0
        if progress is not None and elapsed >= PROGRESS_AFTER:
            progress(f"partition {what}: {text} ({elapsed:.1f} s)")
    return say


def _available(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _default(A, k: int, loads: np.ndarray, cap: int, net: Callable[[], ColumnNet],
             base_of: Callable,
             bases: dict, compute: Callable, t0: float, time_budget: float | None, seed: int,
             refine_options: dict, say: Callable[[str], None]) -> list[dict]:
    """The candidates of ``default`` under its time rule (``budget.plan_step``): METIS-vol
    (its time sets the budget), KaMinPar, Mt-KaHyPar's fast preset in a child killed at its
    deadline, each base rebalanced under the cap; then the multilevel refinement of the bases,
    best score first, each with the budget's end as deadline. ``base_of(b)`` computes base
    ``b`` and keeps it in ``bases`` with its seconds; ``compute(b)`` only computes it. A step
    the rule skips is listed with ``skipped`` (why), without volumes."""
    n, pins = A.shape[0], int(A.nnz) + A.shape[0]  # pins of pattern(A) + I, at most
    first = "metis-vol"
    base_of(first)
    t_metis = time.perf_counter() - t0
    budget = default_budget(t_metis) if time_budget is None else float(time_budget)
    say(f"budget {budget:.1f} s")
    skipped: list[dict] = []

    def until(step: str, name: str) -> float | None:
        end = plan_step(step, time.perf_counter() - t0, budget, t_metis, pins, k, n)
        if end is None:
            why = (f"no second base from {BASES_MAX_N:,} vertices" if step != "refine"
                   and n >= BASES_MAX_N else f"the time rule ({budget:.1f} s): "
                   f"{time.perf_counter() - t0:.1f} s spent")
            skipped.append(dict(method=name, skipped=why))
            return None
        return t0 + end

    names = [first]
    if _available("kaminpar") and until("kaminpar", "kaminpar") is not None:
        base_of("kaminpar")
        names.append("kaminpar")
    fast = "mtkahypar-fast"
    if _available("mtkahypar") and (end := until("mtkahypar", fast)) is not None:
        t = time.perf_counter()
        p = run_until(lambda: compute(fast), end)
        if p is None:
            skipped.append(dict(method=fast, seconds=time.perf_counter() - t,
                                skipped="did not finish by its deadline"))
            say(f"{fast} stopped at its deadline")
        else:
            _check_parts(fast, p, n, k)
            bases[fast] = (p, time.perf_counter() - t)
            say(f"{fast} {time.perf_counter() - t:.1f} s")
            names.append(fast)
    candidates = []
    for b in names:
        p, secs = base_of(b)
        t = time.perf_counter()
        p = _balanced(net, loads, p, k, cap)
        candidates.append(dict(method=b, parts=p, metrics=metrics(A, p, k),
                               seconds=secs + time.perf_counter() - t))
    def refine(c: dict, fast: bool) -> dict | None:
        """Candidate ``c`` refined (``fast``: label propagation only, ``LARGE_GRAPH_
        REFINEMENT``; else the full refinement with FM passes) until the budget's end."""
        name = f"{c['method'].split('+')[0]}+{MULTILEVEL}"
        end = until("refine", name)
        if end is None:
            return None
        options = dict(LARGE_GRAPH_REFINEMENT, **refine_options) if fast else dict(
            refine_options)
        if end < math.inf:
            options.setdefault("deadline", end)
        t = time.perf_counter()
        p = refine_multilevel(net(), loads, c["parts"], k, cap, seed=seed, **options)[0]
        m = metrics(A, p, k)
        how = "lp" if fast else f"{c.get('refinement', 'none')}+full"
        say(f"{name} ({how}) {time.perf_counter() - t:.1f} s: total {m.total_volume:,}, "
            f"max send {m.max_send:,}")
        return dict(method=name, parts=p, metrics=m, refinement=how,
                    seconds=c["seconds"] + time.perf_counter() - t)

    # the cheap refinement of every base, best base first; then, with the time that is
    # left, the full refinement of the best so far (where FM does the work: meshes)
    refined = [r for c in sorted(candidates, key=lambda c: score(c["metrics"]))
               if (r := refine(c, fast=True)) is not None]
    if refined and n < LARGE_GRAPH:
        best = min(refined, key=lambda c: score(c["metrics"]))
        if (r := refine(best, fast=False)) is not None:
            refined.append(r)
    return candidates + refined + skipped
