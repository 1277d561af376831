"""Sparsity-aware 1D SpMM (ICPP'24, Algorithm 1).

Each rank owns block row i of A and of X. It fetches only the rows of X named by the
non-empty columns of its off-diagonal blocks (NnzCols(i, j) for j != i) with one
all-to-allv, posted before the local product so the rows travel while it runs:
Z_i = A_ii X_i + A_i,ghost X[ghost].
The transpose ``A^T Y`` runs the same plan backwards: partial sums for ghost columns are
computed first, reduced into their owners' rows while the diagonal block is multiplied.
"""

from __future__ import annotations

from .base import DistSpMM
from .ghost import GhostProduct, resolve_codecs


class Sparse1D(DistSpMM):
    name = "sparse1d"
    takes_codecs = True
    takes_exchange = True
    delayed_remote = True

    def __init__(self, grid, partition, block_row, col_partition=None,
                 codec: str | None = None, codec_backward: str | None = "same",
                 codec_seed: int = 0, **options):
        super().__init__(grid, partition, block_row, col_partition, **options)
        self.codec, self.codec_backward = resolve_codecs(grid.comm, codec, codec_backward)
        self.product = GhostProduct(block_row, grid.across_block_rows, self.col_offsets,
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

    def _matmul_t(self, y, out, key: int) -> None:
        self.product.matmul_t(y, out, key)
