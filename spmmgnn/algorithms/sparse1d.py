"""Sparsity-aware 1D SpMM (ICPP'24, Algorithm 1).

Each rank owns block row i of A and of X. It fetches only the rows of X named by the
non-empty columns of its off-diagonal blocks (NnzCols(i, j) for j != i) with one
Alltoallv, then multiplies:  Z_i = A_ii X_i + A_i,ghost X[ghost].
The transpose ``A^T Y`` runs the same plan backwards: partial sums for ghost columns are
computed locally and reduced into their owners' rows.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..codecs import get_codec
from ..dist import DistSpMM, register
from ..errors import SpmmgnnError, agree
from ..halo import HaloPlan
from ..local_matrix import split_columns


@register("sparse1d")
class Sparse1D(DistSpMM):
    one_dimensional = True

    def __init__(self, grid, partition, block_row, codec: str | None = None,
                 codec_backward: str | None = "same", codec_seed: int = 0, **options):
        super().__init__(grid, partition, block_row, **options)
        error = None
        try:
            self.codec = get_codec(codec)
            self.codec_backward = self.codec if codec_backward == "same" else get_codec(
                codec_backward)
        except SpmmgnnError as exc:
            error = str(exc)
        agree(grid.comm, error)
        if self.one_dimensional:
            agree(grid.comm, None if grid.replication == 1 else
                  f"{self.name} is a 1D algorithm: use replication=1 (or sparse15d for c > 1)")
        mine = self.multiplied_columns(sp.csr_array(block_row))
        self.diag, self.ghost, ghost_ids = split_columns(mine, self.lo, self.hi)
        self.plan = HaloPlan(grid.col_comm, self.offsets, ghost_ids, seed=codec_seed,
                             stream=grid.rank)

    def multiplied_columns(self, block_row: sp.csr_array) -> sp.csr_array:
        """The part of the block row this rank multiplies: all of it in 1D."""
        return block_row

    def finish(self, out: np.ndarray) -> None:
        """Combine partial results across replicas: nothing to do in 1D."""

    def local_nnz(self) -> int:
        return self.diag.nnz + self.ghost.nnz

    def _matmul(self, x: np.ndarray, out: np.ndarray) -> None:
        ghost_x = self.plan.buffer("ghost", self.plan.n_ghost, x.shape[1], x.dtype)
        self.plan.bcast(x, ghost_x, self.stats, self.codec)
        with self.stats.timing("seconds_multiply"):
            self.diag.matmul(x, out, accumulate=False)
            self.ghost.matmul(ghost_x, out, accumulate=True)
        self.finish(out)

    def _matmul_t(self, y: np.ndarray, out: np.ndarray) -> None:
        partial = self.plan.buffer("ghost", self.plan.n_ghost, y.shape[1], y.dtype)
        with self.stats.timing("seconds_multiply"):
            self.ghost.t_matmul(y, partial, accumulate=False)
            self.diag.t_matmul(y, out, accumulate=False)
        self.plan.reduce(partial, out, self.stats, self.codec_backward)
        self.finish(out)
