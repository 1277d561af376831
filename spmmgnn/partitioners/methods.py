"""The partitioning methods by name and the settings every method shares: the method names
and presets (``parse_method``), the preset constants, the threads a threaded base may take
(``threads_for_load``), the row weight (``check_row_weight``) and the score that ranks
candidates (``score``)."""

from __future__ import annotations

import math
import os

import numpy as np

from ..runtime.errors import SpmmgnnError
from ..runtime.machine import idle_cores
from ..runtime.threads import threads_for
from .metrics import PartitionMetrics

BASE_METHODS = ("block", "random", "metis-cut", "metis-vol", "metis", "kahypar", "mtkahypar",
                "mtkahypar-fast", "kaminpar")
REFINEMENT, MULTILEVEL = "maxsend", "multilevel"
REFINEMENTS = (REFINEMENT, MULTILEVEL)
METHODS = BASE_METHODS + tuple(f"{m}+{r}" for r in REFINEMENTS for m in BASE_METHODS)
# no partitioner: near-equal contiguous blocks of rows (what ``partition=None`` gives)
CONTIGUOUS = ("none", "contiguous")
DEFAULT_METHOD, QUALITY_METHOD = "default", "quality"
PRESETS = (DEFAULT_METHOD, QUALITY_METHOD)
# the candidates of both presets, in the order they run
METIS_CANDIDATE, MTKAHYPAR_CANDIDATE = "metis-vol+multilevel", "mtkahypar+multilevel"
# levels of the multilevel refinement in ``quality`` (``+multilevel`` alone and ``default``:
# multilevel.DEFAULT_LEVELS)
QUALITY_LEVELS = 12
# ``quality``'s default time budget: this many times METIS-vol's time, and at least
# QUALITY_MIN_BUDGET seconds (on a small graph METIS takes milliseconds, and 20x that would
# never let a second candidate start)
QUALITY_BUDGET, QUALITY_MIN_BUDGET = 20.0, 10.0
# ``quality`` keeps the total volume within this factor of the lower of METIS-vol's and
# Mt-KaHyPar's: its refinements stop trading total volume for max send
# there, and a candidate above it is chosen only if none is within it
QUALITY_TOTAL = 1.02
# from this many vertices on, ``+maxsend`` runs with LARGE_GRAPH_REFINEMENT: no FM passes
# (2-3 s each on a 10^5-vertex power-law graph, where METIS takes 0.5-3 s; on meshes they do
# the work), no total-volume rounds (METIS already minimized it: they moved 11-89 vertices)
# and one label-propagation round for each of four penalty weights, so the refinement stays
# within about twice METIS's time. Measured on WordNet, the thesaurus and GCIDE (k = 16, 64):
# max send + total / k within 0.1-0.6 % of two rounds per weight after two total-volume
# rounds, in half the rounds. ``default`` refines every base this way first, on every graph
# (the full refinement follows if its time rule leaves time)
LARGE_GRAPH = 100_000
LARGE_GRAPH_REFINEMENT = dict(fm_passes=0, mu_fm_passes=0, total_lp_rounds=0, lp_rounds=1,
                              mu=(0.02, 0.1, 0.4, 1.0))


def default_threads() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
        os.cpu_count() or 1)


def threads_for_load(cores: int) -> tuple[int, str]:
    """Threads for ``default``'s threaded bases (KaMinPar, Mt-KaHyPar) when the caller did
    not choose: the cores that are idle now (``machine.idle_cores``), at least one, so a
    core held by another process is not oversubscribed (on a loaded machine the
    threaded candidates took several times their quiet time while METIS, which sets the
    budget, slowed down by about the core it lost). Returns (threads, a note when cut)."""
    idle = idle_cores(cores)
    if idle is None or cores <= 1:
        return cores, ""
    threads = threads_for(cores, cores, cores - idle)
    note = (f"{threads} thread{'s' if threads > 1 else ''}: {cores - idle:.1f} of {cores} "
            "cores busy with other work" if threads < cores else "")
    return threads, note


def parse_method(method: str) -> tuple[str, str | None]:
    """(base partitioner, the refinement that follows: ``maxsend``, ``multilevel`` or None)
    for a method name (the presets are resolved by ``partition``)."""
    name = str(method).strip().lower()
    base, plus, rest = name.partition("+")
    if base not in BASE_METHODS or (plus and rest not in REFINEMENTS):
        raise SpmmgnnError(f"unknown partitioning method {method!r}; choose one of "
                           f"{', '.join(METHODS)}, {DEFAULT_METHOD!r} (fast: the best of "
                           "METIS-vol, KaMinPar and Mt-KaHyPar refined within 3x METIS's "
                           f"time) or {QUALITY_METHOD!r}")
    return base, rest if plus else None


def score(m: PartitionMetrics) -> float:
    """What "better" means when a method keeps the best of several partitions."""
    return m.max_send + m.total_volume / m.k


ROW_WEIGHT_GCN = 16  # a GCN step's dense work per row, in its SpMMs' non-zeros (measured)
ROW_WEIGHT_MAX = 4096


def check_row_weight(value) -> int:
    """``row_weight`` as an int in [0, ``ROW_WEIGHT_MAX``], or one readable error."""
    if (isinstance(value, bool) or not isinstance(value, (int, np.integer))
            or not 0 <= value <= ROW_WEIGHT_MAX):
        raise SpmmgnnError(f"the row weight (--row-weight) must be an integer from 0 to "
                           f"{ROW_WEIGHT_MAX} (the non-zeros one row's other work is worth), "
                           f"got {value!r}")
    return int(value)


def check_row_weight_use(row_weight: int, method: str, flag: str) -> None:
    """``--row-weight`` weighs what a partitioner balances: an error without one (``flag``:
    the option that names the method)."""
    if row_weight and str(method).strip().lower() in CONTIGUOUS:
        raise SpmmgnnError(f"--row-weight weighs the rows a partitioner balances; {flag} "
                           f"{method} makes contiguous blocks of near-equal rows already: "
                           "give a partitioner or drop --row-weight")


def _check_non_negative(name: str, value) -> None:
    if (isinstance(value, bool) or not isinstance(value, (int, float, np.floating))
            or not math.isfinite(value) or value < 0):
        raise SpmmgnnError(f"{name} must be a non-negative number, got {value!r}")
