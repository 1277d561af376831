"""``partition(A, k, method=...)``: one entry point for every partitioner.

A method is a base partitioner, optionally followed by ``+maxsend`` (the max-send-volume
refinement of ``maxsend``), e.g. ``metis-vol+maxsend``:

* ``block``, ``random`` (``simple``); ``metis-cut``, ``metis-vol`` (METIS k-way with the
  edge-cut / communication-volume objective); ``metis`` runs both objectives and keeps the
  better result; ``kahypar``, ``mtkahypar`` (column-net hypergraph).
* ``+maxsend``: ``refine_max_send`` starts from the base partition (same epsilon) and
  lowers the total and the maximum send volume; its total-volume phase runs under half the
  epsilon, which leaves load slack for the max-send phase. It never returns a higher maximum
  send than the base partition's.

"Better" is the lower ``max send + total / k`` (the bottleneck plus the average send). Every
result is checked against the load cap (``model.load_cap``) and rebalanced if a base
partitioner overshot it, so all methods keep the load imbalance <= epsilon when possible.

Graph methods (``metis*``) symmetrize a directed A; the hypergraph methods (``kahypar``,
``mtkahypar``) and the refinement model the exact volume of any A.

``default`` is the best combination measured by ``bench/partition.py``, chosen by the degree
skew of A (``default_method``): on graphs with hubs (power-law, e.g. R-MAT) ``metis+maxsend``
(Mt-KaHyPar is 35x slower than METIS there and its maximum send is 1.8-2.6x higher); on
graphs without hubs (meshes, block models) ``mtkahypar+maxsend`` (Mt-KaHyPar's total volume
is 2-12 % below METIS's there).
"""

from __future__ import annotations

import math
import os
import time
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from ..errors import SpmmgnnError
from ..layout import Partition
from .hypergraph import kahypar_parts, mtkahypar_parts
from .maxsend import rebalance, refine_max_send
from .metis import metis_parts
from .metrics import PartitionMetrics, metrics
from .model import ColumnNet, as_square_csr, load_cap, row_loads
from .simple import block_parts, random_parts

BASE_METHODS = ("block", "random", "metis-cut", "metis-vol", "metis", "kahypar", "mtkahypar")
REFINEMENT = "maxsend"
METHODS = BASE_METHODS + tuple(f"{m}+{REFINEMENT}" for m in BASE_METHODS)
DEFAULT_METHOD = "default"
HUB_DEFAULT, REGULAR_DEFAULT = "metis+maxsend", "mtkahypar+maxsend"
# degree skew rms(loads)/mean(loads) at which a graph counts as having hubs: R-MAT 2.8-5,
# Erdos-Renyi and block models 1.0-1.1, meshes 1.0
HUB_SKEW = 1.5
# the total-volume phase of the refinement runs under this fraction of epsilon, leaving the
# rest of the load slack to the max-send phase (moves stall against a cap every part touches)
VOLUME_PHASE_EPSILON_FRACTION = 0.5


def default_threads() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
        os.cpu_count() or 1)


def default_method(loads: np.ndarray) -> str:
    """What ``default`` means for a matrix with these row loads (non-zeros per row)."""
    mean = float(loads.mean()) if loads.size else 0.0
    skew = math.sqrt(float(np.mean(loads.astype(np.float64) ** 2))) / mean if mean > 0 else 1.0
    return HUB_DEFAULT if skew >= HUB_SKEW else REGULAR_DEFAULT


def parse_method(method: str, loads: np.ndarray | None = None) -> tuple[str, bool]:
    """(base partitioner, whether the max-send refinement follows) for a method name;
    ``default`` needs the row ``loads`` of the matrix (see ``default_method``)."""
    name = str(method).strip().lower()
    if name == DEFAULT_METHOD and loads is not None:
        name = default_method(loads)
    base, plus, rest = name.partition("+")
    if base not in BASE_METHODS or (plus and rest != REFINEMENT):
        raise SpmmgnnError(f"unknown partitioning method {method!r}; choose one of "
                           f"{', '.join(METHODS)} or {DEFAULT_METHOD!r} ({HUB_DEFAULT} on "
                           f"graphs with hubs, else {REGULAR_DEFAULT})")
    return base, bool(plus)


def score(m: PartitionMetrics) -> float:
    """What "better" means when a method keeps the best of several partitions."""
    return m.max_send + m.total_volume / m.k


def _base_parts(base: str, A, k: int, loads: np.ndarray, cap: int, epsilon: float, seed: int,
                threads: int, cn: ColumnNet) -> np.ndarray:
    if base == "block":
        return block_parts(loads, k, cap)
    if base == "random":
        return random_parts(loads, k, cap, seed)
    if base in ("metis-cut", "metis-vol"):
        return metis_parts(A, k, loads, epsilon, seed, objective=base.split("-")[1])
    if base == "kahypar":
        return kahypar_parts(A, k, loads, epsilon, seed, cn=cn)
    return mtkahypar_parts(A, k, loads, epsilon, seed, threads=threads, cn=cn)


def partition(A, k: int, method: str = DEFAULT_METHOD, epsilon: float = 0.03, seed: int = 0,
              threads: int | None = None, **refine_options) -> Partition:
    """Partition the rows of square sparse ``A`` (the matrix the SpMM applies; a ``Graph``
    means its ``adj``) into ``k`` block rows of balanced non-zeros, minimizing the total
    communication volume and, with ``+maxsend``, the maximum send volume.

    Returns a ``Partition`` (part vector, block offsets, permutation) with ``metrics`` and
    ``seconds`` (partitioning time) filled in. ``threads`` is used by Mt-KaHyPar (default:
    the cores available). ``refine_options`` go to ``maxsend.refine_max_send``.
    """
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise SpmmgnnError(f"the number of parts k must be a positive integer, got {k!r}")
    k = int(k)
    if (isinstance(epsilon, bool) or not isinstance(epsilon, (int, float, np.floating))
            or not math.isfinite(epsilon) or epsilon < 0):
        raise SpmmgnnError(f"epsilon must be a non-negative number, got {epsilon!r}")
    threads = default_threads() if threads is None else int(threads)
    if threads < 1:
        raise SpmmgnnError(f"threads must be positive, got {threads}")
    A = as_square_csr(A)
    n = A.shape[0]
    loads = row_loads(A)
    base, refine = parse_method(method, loads)
    cap = load_cap(loads, k, epsilon)
    t0 = time.perf_counter()
    chosen = None
    if k == 1 or n == 0:
        parts = np.zeros(n, dtype=np.int64)
    elif n <= k:  # one vertex per part: the only choice that respects the load cap
        parts = (np.random.default_rng(seed).permutation(k)[:n] if base == "random"
                 else np.arange(n, dtype=np.int64))
    else:
        cn = ColumnNet.from_matrix(A)
        volume_cap = load_cap(loads, k, epsilon * VOLUME_PHASE_EPSILON_FRACTION)
        bases = ("metis-cut", "metis-vol") if base == "metis" else (base,)

        def finish(p: np.ndarray) -> np.ndarray:
            if refine:
                options = dict(refine_options)
                options.setdefault("volume_cap", volume_cap)
                return refine_max_send(cn, loads, p, k, cap, seed=seed, **options)[0]
            return rebalance(cn, loads, p, k, cap)[0]

        # with a second thread, a candidate's refinement (numba, no GIL) overlaps the next
        # base partitioner; every candidate's result is independent of the thread count
        pool = ThreadPoolExecutor(1) if threads > 1 and len(bases) > 1 else None
        try:
            candidates = []
            for b in bases:
                p = _base_parts(b, A, k, loads, cap, epsilon, seed, threads, cn)
                if p.shape != (n,) or p.min() < 0 or p.max() >= k:
                    raise SpmmgnnError(f"{b} returned an invalid part vector")
                candidates.append(pool.submit(finish, p) if pool and b != bases[-1]
                                  else finish(p))
            candidates = [c.result() if isinstance(c, Future) else c for c in candidates]
        finally:
            if pool:
                pool.shutdown(cancel_futures=True)
        chosen, parts = min(((metrics(A, p, k), p) for p in candidates),
                            key=lambda mp: score(mp[0]))
    seconds = time.perf_counter() - t0
    result = Partition.from_parts(parts, k, method=f"{base}+{REFINEMENT}" if refine else base)
    result.metrics = metrics(A, parts, k) if chosen is None else chosen
    result.seconds = seconds
    return result
