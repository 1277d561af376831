"""Sparsity-aware 2D SpMM on a pr x pc grid (expand / multiply / fold; 2D with 1D vectors).

Rank (i, j) owns part i pc + j of a P-way vertex partition: its rows of X and of A X. It holds
the tile A[I_i, J_j] (I_i: the parts of process row i, J_j: of process column j), moved there
once from the block rows. One SpMM:

1. *expand*: fetch the rows of X in NnzCols(A[I_i, J_j]) from their owners, which all sit in
   process column j (the grid's ``row`` dimension): at most pr - 1 peers;
2. multiply the tile;
3. *fold*: send the partial sums of the rows in NnzRows(A[I_i, J_j]) that are not mine to
   their owners in process row i (the ``col`` dimension): at most pc - 1 peers.

Both phases are halo plans (bcast and reduce), so codecs, byte counters and overlap work as in
the 1D algorithms; ``A^T Y`` runs them backwards. Unlike ``oblivious2d`` (CAGNET's SUMMA), A
never moves after construction and only the rows the tile names travel.

No rank sends more than on ``oblivious2d``: a call (width, dtype, direction) on which some
rank would runs SUMMA instead (``grid_route.py``; ``route()`` says which a call took).
"""

from __future__ import annotations

import numpy as np

from .base import DistSpMM
from .expand_fold import ExpandFold
from .ghost import resolve_codecs
from .grid_route import GridRoute
from .tiles import SparseTiles


class Sparse2D(DistSpMM):
    name = "sparse2d"
    grid_kinds = ("2d",)
    takes_codecs = True
    takes_exchange = True
    bounded_by = "oblivious2d"   # never sends more on any rank (grid_route.py)

    def __init__(self, grid, partition, block_row, col_partition=None,
                 codec: str | None = None, codec_backward: str | None = "same",
                 codec_seed: int = 0, **options):
        super().__init__(grid, partition, block_row, col_partition, **options)
        self.codec, self.codec_backward = resolve_codecs(grid.comm, codec, codec_backward)
        self.tiles = SparseTiles(grid, self.row_offsets, self.col_offsets)
        tile = self.tiles.gather(grid.comm, block_row, self.lo)
        self.product = ExpandFold(tile, grid.comm_along("row"), self.tiles.cols.offsets,
                                  grid.comm_along("col"), self.tiles.fold_offsets, self.stats,
                                  self.codec, self.codec_backward, seed=codec_seed,
                                  stream=grid.rank, make_plan=self.halo_plan,
                                  backend=self.backend)
        # the tile's columns are one part per process row (SparseTiles.cols)
        by_row = np.bincount(np.searchsorted(self.tiles.cols.offsets, tile.indices,
                                             side="right") - 1, minlength=self.tiles.shape[0])
        self.router = GridRoute(grid, self.row_offsets, self.col_offsets, self.tiles, by_row,
                                self.stats, routed=self.exchange == "flat")

    def route(self, f: int, dtype, forward: bool = True) -> str:
        """"sparse" or "oblivious": the route calls of width f and ``dtype`` take
        (collective on its first use for a key)."""
        return "oblivious" if self.router.oblivious(self.exchange_plans(), f, dtype,
                                                    forward) else "sparse"

    def exchange_plans(self) -> list:
        return [self.product.expand, self.product.fold]

    def local_nnz(self) -> int:
        return self.product.nnz

    def _matmul(self, x, out, key: int) -> None:
        if self.route(x.shape[1], self.backend.dtype(x), True) == "oblivious":
            self.router.product(self.product).matmul(x, out)
        else:
            self.sparse_matmul(x, out, key)

    def _matmul_t(self, y, out, key: int) -> None:
        if self.route(y.shape[1], self.backend.dtype(y), False) == "oblivious":
            self.router.product(self.product).matmul_t(y, out)
        else:
            self.sparse_matmul_t(y, out, key)

    def sparse_matmul(self, x, out, key: int) -> None:
        self.product.matmul(x, out, key)

    def sparse_matmul_t(self, y, out, key: int) -> None:
        self.product.matmul_t(y, out, key)
