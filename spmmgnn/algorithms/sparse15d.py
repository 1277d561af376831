"""Sparsity-aware 1.5D SpMM on a P/c x c grid (ICPP'24, Algorithm 2).

Block row i of A and X lives on the c ranks P(i, :). Replica j multiplies only the block
columns of its stages: it fetches the rows NnzCols(i, q) of X for q in its stages, from
P(q, j) across block rows, multiplies, and the c partial results are summed by an
all-reduce across the replicas P(i, :).

This is Algorithm 1 restricted to the replica's block columns, plus the all-reduce. The s
stages are fused into one all-to-allv: stage q's rows come from a different peer, so the one
call moves exactly the union of the per-stage messages (``stage_volumes`` lists them). With
c = 1 it is Algorithm 1, with the same numbers and the same bytes. ``A^T Y`` runs the plan
backwards, then the same all-reduce.
"""

from __future__ import annotations

from .base import DistSpMM
from .ghost import GhostProduct, resolve_codecs
from .replication import Replication


class Sparse15D(DistSpMM):
    name = "sparse15d"
    grid_kinds = ("1d", "1.5d")
    takes_codecs = True
    takes_exchange = True

    def __init__(self, grid, partition, block_row, col_partition=None,
                 codec: str | None = None, codec_backward: str | None = "same",
                 codec_seed: int = 0, **options):
        super().__init__(grid, partition, block_row, col_partition, **options)
        self.codec, self.codec_backward = resolve_codecs(grid.comm, codec, codec_backward)
        self.replication = Replication(grid)
        self.stages = self.replication.stages
        mine = self.replication.restrict(block_row, self.col_offsets)
        self.product = GhostProduct(mine, grid.across_block_rows, self.col_offsets,
                                    self.col_lo, self.col_hi, self.stats, self.codec,
                                    self.codec_backward, seed=codec_seed, stream=grid.rank,
                                    make_plan=self.halo_plan, backend=self.backend)
        self.plan = self.product.plan

    def exchange_plans(self) -> list:
        return [self.plan]

    def local_nnz(self) -> int:
        return self.product.nnz

    def _matmul(self, x, out, key: int) -> None:
        self.product.matmul(x, out, key)
        self.replication.allreduce(out, self.stats)

    def _matmul_t(self, y, out, key: int) -> None:
        self.product.matmul_t(y, out, key)
        self.replication.allreduce(out, self.stats)

    def stage_volumes(self) -> dict[str, dict[int, int]]:
        """Rows received per stage (block column q) and rows sent to each block row."""
        return dict(received={q: int(self.plan.recv_counts[q]) for q in self.stages},
                    sent={q: int(n) for q, n in enumerate(self.plan.send_counts) if n})
