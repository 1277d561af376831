"""Structure-blind partitions: ``block`` (contiguous ranges) and ``random``, both load-balanced.

``block`` cuts the vertex order into k contiguous ranges of near-equal non-zeros (not rows):
each boundary goes to the prefix sum nearest the remaining average, unless that would leave
the rest impossible to fit under the load cap, in which case the range is filled greedily.
``random`` is the same cut applied to a random vertex order (a balanced random assignment).
"""

from __future__ import annotations

import numpy as np

from ..runtime.jit import njit


@njit(cache=True)
def _fits(prefix, start, parts, cap):
    """Can rows start: be cut into ``parts`` ranges of load <= cap (greedy probe)?"""
    n = prefix.size - 1
    pos = start
    for _ in range(parts):
        if pos == n:
            return True
        pos = np.searchsorted(prefix, prefix[pos] + cap, side="right") - 1
    return pos == n


@njit(cache=True)
def _chain_split(prefix, k, cap):
    """Boundaries (k + 1) of k contiguous ranges of the rows with loads given by ``prefix``."""
    n = prefix.size - 1
    bounds = np.zeros(k + 1, dtype=np.int64)
    bounds[k] = n
    lo = 0
    for j in range(k - 1):
        left = k - j
        target = prefix[lo] + (prefix[n] - prefix[lo]) / left
        hi_max = np.searchsorted(prefix, prefix[lo] + cap, side="right") - 1
        i = np.searchsorted(prefix, target)
        if i > lo and (i > n or target - prefix[i - 1] <= prefix[i] - target):
            i -= 1
        i = min(max(i, lo), hi_max, n)
        if not _fits(prefix, i, left - 1, cap):
            i = hi_max
        bounds[j + 1] = i
        lo = i
    return bounds


@njit(cache=True)
def _min_bottleneck(prefix, k, lo):
    """Smallest B >= lo such that k contiguous ranges of load <= B cover all rows."""
    hi = prefix[prefix.size - 1]
    if _fits(prefix, 0, k, lo):
        return lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _fits(prefix, 0, k, mid):
            hi = mid
        else:
            lo = mid
    return hi


def block_parts(loads: np.ndarray, k: int, cap: int) -> np.ndarray:
    """Part vector of k contiguous ranges balanced by load (rows when all loads are zero).

    Contiguous ranges cannot always meet ``cap`` (a heavy row at a range end); then the cap
    is raised to the smallest bottleneck any contiguous cut achieves."""
    n = loads.size
    w = loads if loads.sum() > 0 else np.ones(n, dtype=np.int64)
    if loads.sum() == 0:
        cap = max(1, -(-n // k))
    prefix = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(w, out=prefix[1:])
    cap = _min_bottleneck(prefix, k, int(cap))
    bounds = _chain_split(prefix, k, int(cap))
    return np.repeat(np.arange(k, dtype=np.int64), np.diff(bounds))


def random_parts(loads: np.ndarray, k: int, cap: int, seed: int = 0) -> np.ndarray:
    """Balanced random assignment: the ``block`` cut of a random vertex order."""
    order = np.random.default_rng(seed).permutation(loads.size)
    parts = np.empty(loads.size, dtype=np.int64)
    parts[order] = block_parts(loads[order], k, cap)
    return parts
