"""Sparsity-oblivious 2D SpMM on a pr x pc grid: CAGNET's SUMMA (SC'20, ``gcn_distr_2d.py``).

In each of the pr stages the tile of A of the stage is broadcast along the process row and a
block of H (rows of the stage, this process column's features) along the process column;
every rank multiplies and accumulates its block of A H. Per call a rank receives about
nnz / pr non-zeros (3 words each) and n f / pc values of H, whatever the sparsity pattern:
CAGNET's 2D cost. Its dense rows keep the library's 1D layout, converted to and from
CAGNET's 2D blocks inside the process row on every call (``summa.py``). The baseline of
``sparse2d``.
"""

from __future__ import annotations

import numpy as np

from .base import DistSpMM
from .summa import Summa
from .tiles import SummaTiles


class Oblivious2D(DistSpMM):
    name = "oblivious2d"
    grid_kinds = ("2d",)

    def __init__(self, grid, partition, block_row, col_partition=None, **options):
        super().__init__(grid, partition, block_row, col_partition, **options)
        tiles = SummaTiles(grid, self.row_offsets, self.col_offsets)
        self.product = Summa(grid, tiles, tiles.gather(grid.comm, block_row, self.lo),
                             self.stats)

    def local_nnz(self) -> int:
        return self.product.nnz_multiplied

    def local_matrices(self) -> list:
        return []   # the tiles run one fixed kernel (they are re-sent on every call)

    def _matmul(self, x: np.ndarray, out: np.ndarray, key: int) -> None:
        self.product.matmul(x, out)

    def _matmul_t(self, y: np.ndarray, out: np.ndarray, key: int) -> None:
        self.product.matmul_t(y, out)
