"""Sparsity-oblivious 1D SpMM (CAGNET, SC'20), for uneven blocks too.

Stage q broadcasts the whole block row X_q from its owner; every rank multiplies its block
A_iq with it:  Z_i = sum_q A_iq X_q.  The transpose reduces A_iq^T Y_i onto the owner of q.
"""

from __future__ import annotations

from .base import DistSpMM
from .block_broadcast import BlockBroadcast


class Oblivious1D(DistSpMM):
    name = "oblivious1d"

    def __init__(self, grid, partition, block_row, col_partition=None, **options):
        super().__init__(grid, partition, block_row, col_partition, **options)
        self.stages = range(grid.n_block_rows)
        self.product = BlockBroadcast(block_row, grid.across_block_rows, self.col_offsets,
                                      self.stages,
                                      ~grid.node_map(grid.across_block_rows).same,
                                      self.backend, grid.link(grid.across_block_rows))

    def local_nnz(self) -> int:
        return self.product.nnz

    def _matmul(self, x, out, key: int) -> None:
        self.product.matmul(x, out, self.stats)

    def _matmul_t(self, y, out, key: int) -> None:
        self.product.matmul_t(y, out, self.stats)
