"""Matrices and row layouts shared by the per-algorithm MPI workers (imported as a sibling
module: the worker's own folder is first on ``sys.path``)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def cases(P: int) -> list[tuple[str, sp.csr_array, object]]:
    """(name, A, partition): non-symmetric square A with near-equal blocks, uneven block sizes
    with an empty block (P > 1), and a rectangular A."""
    rng = np.random.default_rng(P)
    sizes = rng.integers(3, 15, P)
    if P > 1:
        sizes[1] = 0  # an empty block
    n = int(sizes.sum())
    return [("nonsymmetric", sp.random(8 * P + 3, 8 * P + 3, density=0.2, random_state=1,
                                       format="csr"), None),
            ("uneven_empty_block", sp.random(n, n, density=0.25, random_state=2, format="csr"),
             sizes.tolist()),
            ("rectangular", sp.random(6 * P + 1, 9 * P + 2, density=0.2, random_state=3,
                                      format="csr"), None)]
