"""Lower bound on the maximum send volume that hubs force on any balanced partition.

Net c (column c of A, owned by vertex c; ``model.ColumnNet``) has the pins
``{c} U {r : A[r, c] != 0}`` of total load ``W_c`` (row non-zeros). Every part holds at most
``cap`` load, so the pins of net c lie in at least ``ceil(W_c / cap)`` parts, and the part that
owns c sends its row of X to all of them but itself:

    b_c = min(k - 1, |pins_c| - 1, ceil(W_c / cap) - 1)   rows, whatever the partition.

The send volume of part p is at least the sum of ``b_c`` over the columns p owns, and the
columns are split among k parts, so (a bin-packing bound)

    max send >= hub_bound = max(max_c b_c, ceil(sum_c b_c / k)).

On graphs whose hubs are adjacent to a large share of the load (web pages linked from every
page, packages everything depends on) the first term is k - 1 per hub and a part that owns
several hubs cannot go below their sum; on meshes the bound is 0 and says nothing.
"""

from __future__ import annotations

import numpy as np

from .model import ColumnNet


def hub_demands(cn: ColumnNet, loads: np.ndarray, k: int, cap: int) -> np.ndarray:
    """``b_c`` of every net: the rows its owner must send in any partition under ``cap``."""
    w = np.asarray(loads, dtype=np.int64)
    sizes = cn.net_sizes()
    if cn.npins.size == 0 or cap <= 0:
        return np.zeros(cn.m, dtype=np.int64)
    net_of_pin = np.repeat(np.arange(cn.m), sizes)
    W = np.rint(np.bincount(net_of_pin, weights=w[cn.npins], minlength=cn.m)).astype(np.int64)
    need = -(-W // cap) - 1  # ceil(W / cap) - 1
    return np.clip(np.minimum(need, np.minimum(sizes - 1, k - 1)), 0, None).astype(np.int64)


def hub_bound(cn: ColumnNet, loads: np.ndarray, k: int, cap: int) -> int:
    """Lower bound on the maximum send volume of any partition into k parts under ``cap``."""
    b = hub_demands(cn, loads, k, cap)
    if b.size == 0:
        return 0
    return int(max(int(b.max()), -(-int(b.sum()) // k)))
