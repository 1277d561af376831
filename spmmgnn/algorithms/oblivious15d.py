"""Sparsity-oblivious 1.5D SpMM on a P/c x c grid (CAGNET 1.5D).

Replica j of block row i handles the block columns of its stages: in stage q the whole block
row X_q is broadcast from P(q, j) over the column communicator and P(i, j) multiplies
A_iq X_q; the c partial results are summed over the row communicator. ``A^T Y`` reduces
A_iq^T Y_i onto P(q, j) per stage, then the same all-reduce. c = 1 is oblivious1d.
"""

from __future__ import annotations

import numpy as np

from ..dist import register
from ..stages import stages_of
from .oblivious1d import Oblivious1D
from .sparse15d import row_allreduce


@register("oblivious15d")
class Oblivious15D(Oblivious1D):
    one_dimensional = False

    def multiplied_stages(self) -> range:
        return stages_of(self.grid.n_block_rows, self.grid.replication, self.grid.replica)

    def finish(self, out: np.ndarray) -> None:
        row_allreduce(self.grid, out, self.stats)
