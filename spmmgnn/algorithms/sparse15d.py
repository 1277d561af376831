"""Sparsity-aware 1.5D SpMM on a P/c x c grid (ICPP'24, Algorithm 2).

Block row i of A and X lives on the c ranks P(i, :). Replica j multiplies only the block
columns of its stages (``stages_of``): it fetches the rows NnzCols(i, q) of X for q in its
stages, from P(q, j) in its column communicator, multiplies, and the c partial results are
summed by an all-reduce over the row communicator P(i, :).

This is Algorithm 1 restricted to the replica's block columns, plus the row all-reduce. The
s stages are fused into one Alltoallv on the column communicator: stage q's rows come from a
different peer, so the one call moves exactly the union of the per-stage messages (the
per-stage counts are reported by ``stage_volumes``). With c = 1 it is Algorithm 1, with the
same numbers and the same bytes. ``A^T Y`` runs the plan backwards, then the same all-reduce.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from ..convert import mpi_float_type
from ..dist import register
from ..stages import stages_of
from .sparse1d import Sparse1D


def restrict_to_stages(block_row: sp.csr_array, offsets: np.ndarray, stages: range):
    """Keep only the columns of block columns ``stages`` (global numbering kept)."""
    if len(stages) == 0:
        return sp.csr_array(block_row.shape)
    lo, hi = int(offsets[stages.start]), int(offsets[stages.stop])
    keep = (block_row.indices >= lo) & (block_row.indices < hi)
    rows = np.repeat(np.arange(block_row.shape[0]), np.diff(block_row.indptr))
    return sp.csr_array((block_row.data[keep], (rows[keep], block_row.indices[keep])),
                        shape=block_row.shape)


def row_allreduce(grid, out: np.ndarray, stats) -> None:
    """Sum the c replicas' partial results in place, over the row communicator only (an
    all-reduce over all P ranks would count every block row c times)."""
    if grid.replication == 1:
        return
    with stats.timing("seconds_allreduce"):
        grid.row_comm.Allreduce(MPI.IN_PLACE, [out, mpi_float_type(out.dtype)], op=MPI.SUM)
    stats.allreduces += 1
    stats.allreduce_bytes += out.nbytes


@register("sparse15d")
class Sparse15D(Sparse1D):
    one_dimensional = False

    def multiplied_columns(self, block_row: sp.csr_array) -> sp.csr_array:
        self.stages = stages_of(self.grid.n_block_rows, self.grid.replication,
                                self.grid.replica)
        return restrict_to_stages(block_row, self.offsets, self.stages)

    def finish(self, out: np.ndarray) -> None:
        row_allreduce(self.grid, out, self.stats)

    def stage_volumes(self) -> dict[str, dict[int, int]]:
        """Rows received per stage (block column q) and rows sent to each block row."""
        return dict(received={q: int(self.plan.recv_counts[q]) for q in self.stages},
                    sent={q: int(n) for q, n in enumerate(self.plan.send_counts) if n})
