"""Which block columns each replica of a 1.5D grid multiplies (its *stages*).

With k = P/c block columns and c replicas, replica j takes a contiguous range of them. When
c divides k every replica gets the paper's s = P/c^2 stages; otherwise the first k % c
replicas get one stage more, so no replica does more than one stage beyond another.
"""

from __future__ import annotations

import numpy as np


def stage_ranges(k: int, c: int) -> np.ndarray:
    """``bounds`` with replica j owning block columns bounds[j]:bounds[j+1]."""
    base, extra = divmod(k, c)
    counts = np.full(c, base, dtype=np.int64)
    counts[:extra] += 1
    bounds = np.zeros(c + 1, dtype=np.int64)
    np.cumsum(counts, out=bounds[1:])
    return bounds


def stages_of(k: int, c: int, replica: int) -> range:
    b = stage_ranges(k, c)
    return range(int(b[replica]), int(b[replica + 1]))
