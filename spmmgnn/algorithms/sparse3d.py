"""Sparsity-aware 3D SpMM on a pr x pc x pl grid: ``sparse2d`` in each layer on the layer's
share of the inner dimension, then the partial results summed across the layers (the shape of
CAGNET's Split-3D-SpMM, with only the needed rows moved).

Rank (i, j, l) owns part (i pc + j) pl + l of a P-way vertex partition. Layer l multiplies the
columns J_jl (the parts of process column j in layer l): rank (i, j, l) holds A[I_i, J_jl],
with I_i all the parts of process row i. One SpMM:

1. *expand* in the layer: the rows of X in NnzCols of the tile, from process column j of layer
   l (``row`` dimension, <= pr - 1 peers);
2. multiply;
3. *fold* in the layer: partial rows go to the rank of process row i in layer l whose fiber
   (i, j', .) owns them (``col`` dimension, <= pc - 1 peers), which sums what its layer
   computed for the fiber;
4. *fiber reduce*: the fiber's partial rows go to their owners across the layers (``layer``
   dimension, <= pl - 1 peers): one partial row per layer and row, whatever the number of
   ranks in the layer that touched it.

Peers per rank <= pr + pc + pl - 3. With pl = 1 it is ``sparse2d``. ``A^T Y`` runs the
three exchanges backwards. As ``sparse2d``, a call on which some rank would send more than on
``oblivious3d`` runs SUMMA instead (``grid_route.py``).
"""

from __future__ import annotations

import numpy as np

from .expand_fold import ExpandFold
from .sparse2d import Sparse2D


class Sparse3D(Sparse2D):
    name = "sparse3d"
    grid_kinds = ("3d",)
    bounded_by = "oblivious3d"   # never sends more on any rank (grid_route.py)

    def __init__(self, grid, partition, block_row, col_partition=None,
                 codec: str | None = None, codec_backward: str | None = "same",
                 codec_seed: int = 0, **options):
        super().__init__(grid, partition, block_row, col_partition, codec=codec,
                         codec_backward=codec_backward, codec_seed=codec_seed, **options)
        tiles = self.tiles
        self.own = tiles.fiber.span(tiles.me)   # my part inside my fiber's rows
        self.fiber_rows = tiles.fiber.size
        touched = np.union1d(_nonempty_rows(self.product), self.product.fold.send_idx)
        outside = (touched < self.own[0]) | (touched >= self.own[1])
        self.fiber = self.halo_plan(grid.comm_along("layer"), tiles.fiber.offsets,
                                    touched[outside], self.codec_backward, self.codec,
                                    codec_seed, 2 * grid.size + grid.rank)

    def exchange_plans(self) -> list:
        return [self.product.expand, self.product.fold, self.fiber]

    def sparse_matmul(self, x, out, key: int) -> None:
        f, plan, be = x.shape[1], self.fiber, self.backend
        rows = plan.buffer("fiber", self.fiber_rows, f, be.dtype(x))
        self.product.matmul(x, rows, key)
        partial = plan.buffer("partial", plan.n_ghost, f, be.dtype(x))
        with self.stats.timing("seconds_exchange"):
            be.gather_rows(rows, plan.ghost_ids, partial)
            out[...] = rows[self.own[0]:self.own[1]]
        plan.start_reduce(partial, out, key).finish()

    def sparse_matmul_t(self, y, out, key: int) -> None:
        f, plan, be = y.shape[1], self.fiber, self.backend
        rows = plan.buffer("fiber", self.fiber_rows, f, be.dtype(y))
        ghost = plan.buffer("ghost", plan.n_ghost, f, be.dtype(y))
        plan.start_bcast(y, ghost, key).finish()
        with self.stats.timing("seconds_exchange"):
            rows[self.own[0]:self.own[1]] = y
            be.put_at(rows, plan.ghost_ids, ghost)
        self.product.matmul_t(rows, out, key)


def _nonempty_rows(product: ExpandFold) -> np.ndarray:
    """The rows of the fiber (own rows of the fold plan) with a non-zero in the tile."""
    counts = sum(np.diff(product.blocks["own", k].indptr) for k in ("own", "ghost"))
    return np.flatnonzero(counts)
