"""What the two 1.5D algorithms share: the c replicas of a block row split the block columns
into stages, and their partial results are summed by an all-reduce across the replicas.

With k = P/c block columns, replica j multiplies a contiguous range of them
(``stages.stage_ranges``): the paper's P/c^2 stages when c divides k, else the first k % c
replicas take one more. The all-reduce runs over the c replicas of one block row only (over
all P ranks it would count every block row c times).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..grid import ProcessGrid
from ..runtime.stats import CommStats
from ..stages import stages_of


class Replication:
    """This rank's stages (block columns it multiplies) and the replica all-reduce."""

    def __init__(self, grid: ProcessGrid):
        self.grid = grid
        self.stages = stages_of(grid.n_block_rows, grid.replication, grid.replica)
        self.link = grid.link(grid.across_replicas)

    def restrict(self, block_row: sp.csr_array, col_offsets: np.ndarray) -> sp.csr_array:
        """The block row with only the columns of this replica's stages (global ids kept)."""
        if len(self.stages) == 0:
            return sp.csr_array(block_row.shape)
        lo, hi = int(col_offsets[self.stages.start]), int(col_offsets[self.stages.stop])
        keep = (block_row.indices >= lo) & (block_row.indices < hi)
        rows = np.repeat(np.arange(block_row.shape[0]), np.diff(block_row.indptr))
        return sp.csr_array((block_row.data[keep], (rows[keep], block_row.indices[keep])),
                            shape=block_row.shape)

    def allreduce(self, out, stats: CommStats) -> None:
        """Sum the c replicas' partial results in place (the grid's backend arrays)."""
        if self.grid.replication == 1:
            return
        with stats.timing("seconds_allreduce"):
            self.link.allreduce(out, "sum", stats, "replicas")
        stats.count_allreduce(self.grid.backend.nbytes(out))
