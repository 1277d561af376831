"""Sparsity-oblivious 1.5D SpMM on a P/c x c grid (CAGNET 1.5D).

Replica j of block row i handles the block columns of its stages: in stage q the whole block
row X_q is broadcast from P(q, j) across block rows and P(i, j) multiplies A_iq X_q; the c
partial results are summed across the replicas. ``A^T Y`` reduces A_iq^T Y_i onto P(q, j)
per stage, then the same all-reduce. c = 1 is oblivious1d.
"""

from __future__ import annotations

from .base import DistSpMM
from .block_broadcast import BlockBroadcast
from .replication import Replication


class Oblivious15D(DistSpMM):
    name = "oblivious15d"
    grid_kinds = ("1d", "1.5d")

    def __init__(self, grid, partition, block_row, col_partition=None, **options):
        super().__init__(grid, partition, block_row, col_partition, **options)
        self.replication = Replication(grid)
        self.stages = self.replication.stages
        self.product = BlockBroadcast(block_row, grid.across_block_rows, self.col_offsets,
                                      self.stages,
                                      ~grid.node_map(grid.across_block_rows).same,
                                      self.backend, grid.link(grid.across_block_rows))

    def local_nnz(self) -> int:
        return self.product.nnz

    def _matmul(self, x, out, key: int) -> None:
        self.product.matmul(x, out, self.stats)
        self.replication.allreduce(out, self.stats)

    def _matmul_t(self, y, out, key: int) -> None:
        self.product.matmul_t(y, out, self.stats)
        self.replication.allreduce(out, self.stats)
