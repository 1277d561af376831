"""The time rule of ``default``, and a base partitioner run in a child killed at a deadline.

``default`` must finish within ``max(DEFAULT_BUDGET x METIS-vol's time, DEFAULT_MIN_BUDGET)``:
a user waits at most three METIS runs, or two seconds on a small graph. METIS-vol
runs first and its measured time sets the budget; every later step asks ``plan_step``
whether it may start with the time that is left:

* ``kaminpar`` (KaMinPar, usually faster than METIS): if at least half METIS's time is left
  before the refinement's reserve;
* ``mtkahypar`` (Mt-KaHyPar's fast preset, in a forked child killed at its deadline, so an
  overrun costs only the time it was given): if the time left before the refinement's reserve
  is at least ``mt_seconds`` (``MT_SECONDS_PER_PIN`` per pin of the hypergraph, the fastest
  rate measured on the bench graphs, growing with log k: below it the run cannot finish and
  would only burn the budget), and up to ``MT_MAX_PINS`` pins;
* ``refine`` (the multilevel max-send refinement of a base, with the budget's end as its
  deadline, so it stops starting passes there): if at least ``REFINE_MIN_SHARE`` of the
  budget is left.

The reserve for the refinement is ``REFINE_SHARE`` of the budget. From ``BASES_MAX_N``
vertices on no second base runs: the whole budget goes to the first base's refinement.
``plan_step`` is a pure function of the times and sizes, so the rule is tested apart from any
clock.
"""

from __future__ import annotations

import math
import os
import select
import signal
import time
from collections.abc import Callable

import numpy as np

from ..runtime import signals

DEFAULT_BUDGET, DEFAULT_MIN_BUDGET = 3.0, 2.0
# the steps plan to end by this share of the budget: a label-propagation round or FM chunk
# that has started, the final metrics and the process's noise take the rest
DEFAULT_MARGIN = 0.9
REFINE_SHARE, REFINE_MIN_SHARE = 0.35, 0.1
# Mt-KaHyPar's fastest rate on the bench graphs (2 threads, default preset): 1.9 us per pin
# (elephant, k = 16); 5-10 us on the hub-heavy graphs and at k = 64
MT_SECONDS_PER_PIN = 1.9e-6
# Mt-KaHyPar's Python interface takes the nets as lists of Python ints (about 60 bytes a
# pin): above this many pins the copy alone outgrows the graph, so ``default`` skips it
MT_MAX_PINS = 20_000_000
STEPS = ("kaminpar", "mtkahypar", "refine")
# KaMinPar took 0.1-0.5x METIS-vol's time on the bench graphs (bench/results/partition_real.md)
KAMINPAR_SHARE = 0.5
# from this many vertices on, ``default`` runs no second base (KaMinPar, Mt-KaHyPar) and gives
# the time to the refinement of the first: on WordNet, the thesaurus and GCIDE (k = 16, 64) a
# KaMinPar base scored worse than METIS-vol's (total 1.03-1.17x), Mt-KaHyPar's fast preset did
# not finish in the time it was given (6 and 25 s on the thesaurus and GCIDE at k = 64), and
# the time they took cut METIS-vol's refinement short (3-5 % worse than refining it to the end)
BASES_MAX_N = 100_000
def default_budget(metis_seconds: float) -> float:
    """Seconds ``default`` may take in all, from METIS-vol's time."""
    return max(DEFAULT_BUDGET * float(metis_seconds), DEFAULT_MIN_BUDGET)


def plan_step(step: str, elapsed: float, budget: float, metis_seconds: float,
              pins: int, k: int, n: int = 0) -> float | None:
    """May ``step`` of ``default`` start ``elapsed`` seconds into a ``budget`` (on a graph
    of ``n`` vertices and ``pins`` pins)? Returns the seconds (from the start) by which it
    must end, or None to skip it."""
    if step not in STEPS:
        raise ValueError(f"unknown step {step!r}; one of {STEPS}")
    if step != "refine" and n >= BASES_MAX_N:
        return None  # METIS-vol's refinement makes better use of the time there
    if budget == float("inf"):  # no rule: every step runs to its end
        return budget
    end = DEFAULT_MARGIN * budget
    left = end - elapsed
    if step == "refine":
        return end if left >= REFINE_MIN_SHARE * budget else None
    before_refine = end - REFINE_SHARE * budget
    left_before = before_refine - elapsed
    if step == "kaminpar":
        return before_refine if left_before >= KAMINPAR_SHARE * metis_seconds else None
    if pins > MT_MAX_PINS:
        return None
    return before_refine if left_before >= mt_seconds(pins, k) else None


def mt_seconds(pins: int, k: int) -> float:
    """The least time Mt-KaHyPar's fast preset takes (``MT_SECONDS_PER_PIN`` per pin at
    k <= 16, growing with log k: 1.9 and 5.4 us per pin at k = 16 and 64 on a mesh)."""
    return MT_SECONDS_PER_PIN * pins * max(1.0, math.log2(max(k, 2)) / 4.0)


def _child(fn: Callable[[], np.ndarray], r: int, w: int) -> None:
    """The forked child of ``run_until``: ``fn()``'s vector to the pipe, then ``os._exit``
    (status 0 once written; any failure: 1, a short read for the parent)."""
    code = 1
    try:
        os.close(r)
        data = np.ascontiguousarray(fn(), dtype=np.int64).tobytes()
        view = memoryview(data)
        while view:
            view = view[os.write(w, view):]
        code = 0
    except BaseException:  # noqa: BLE001 - the parent sees the short read
        pass
    finally:
        os._exit(code)


def run_until(fn: Callable[[], np.ndarray], deadline: float) -> np.ndarray | None:
    """``fn()`` (returning an int64 vector) in a forked child, or None if it did not finish
    by ``deadline`` (``time.perf_counter()``) or failed: the child is then killed. For a
    library that cannot be interrupted (Mt-KaHyPar holds the GIL and runs to the end). The
    child never returns into the caller's code: it writes the vector to a pipe and
    ``os._exit``s (no atexit handler, no MPI call). Also None where ``fork`` is missing."""
    if not hasattr(os, "fork"):
        return None
    r, w = os.pipe()
    chunks, done, pid = [], False, 0
    try:
        with signals.deferred():  # a signal before ``pid`` is set would leave the child be
            pid = os.fork()
            if pid == 0:
                _child(fn, r, w)  # never returns
            os.close(w)
        while True:
            wait = deadline - time.perf_counter()
            if wait <= 0:
                break
            ready, _, _ = select.select([r], [], [], None if wait == float("inf") else wait)
            if not ready:
                break
            chunk = os.read(r, 1 << 20)
            if not chunk:
                done = True
                break
            chunks.append(chunk)
    finally:
        os.close(r)
        if pid and not done:
            os.kill(pid, signal.SIGKILL)
        status = os.waitpid(pid, 0)[1] if pid else 1
    if not done or not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
        return None
    return np.frombuffer(b"".join(chunks), dtype=np.int64).copy()
