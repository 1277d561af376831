"""Locality ordering inside block rows: reverse Cuthill–McKee of each diagonal block.

The local kernels gather one row of X per non-zero; rows whose non-zeros name nearby
columns reuse cache lines. RCM (as MixGCN uses) renumbers the vertices of each block row so
the diagonal block gets a narrow band. The new order is composed into the partition's
``perm`` (``perm[new] = old``), so ``scatter_rows`` / ``gather_rows`` keep the caller's
original order: the reordering is invisible outside the operator. Blocks stay the same sets
of vertices, so every communication volume is unchanged.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .layout import Partition


def block_rcm(A: sp.csr_array, offsets: np.ndarray) -> np.ndarray:
    """``order[new] = old`` within each block row of the (already relabelled) square A: RCM of
    the symmetrized pattern of each diagonal block."""
    from scipy.sparse.csgraph import reverse_cuthill_mckee  # loads on first use

    order = np.arange(A.shape[0], dtype=np.int64)
    for lo, hi in zip(offsets[:-1], offsets[1:], strict=True):
        if hi - lo < 3:
            continue
        block = sp.csr_array(A[lo:hi, lo:hi])
        pattern = sp.csr_array((np.ones(block.nnz, dtype=np.int8), block.indices,
                                block.indptr), shape=block.shape)
        pattern = sp.csr_array(pattern + pattern.T)
        order[lo:hi] = lo + reverse_cuthill_mckee(pattern, symmetric_mode=True)
    return order


def with_order(part: Partition, order: np.ndarray) -> Partition:
    """The same blocks, vertices renumbered inside them by ``order`` (new -> old position)."""
    return part.with_perm(part.perm[order], method=f"{part.method}+rcm")
