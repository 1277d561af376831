"""The P/c x c process grid: P/c block rows, each replicated on c ranks.

Rank r sits at (block row i, replica j) with ``i = r // c`` and ``j = r % c``. The *row
communicator* joins the c replicas of one block row; the *column communicator* joins one
rank per block row (same replica index). 1D is ``replication=1``: the row communicator is
a single rank and the column communicator is the whole world.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mpi4py import MPI

from .errors import agree


@dataclass
class ProcessGrid:
    comm: MPI.Comm = field(default_factory=lambda: MPI.COMM_WORLD)
    replication: int = 1

    def __post_init__(self) -> None:
        size = self.comm.Get_size()
        c = self.replication
        error = None
        if not isinstance(c, int) or c < 1:
            error = f"replication must be a positive integer, got {c!r}"
        elif size % c != 0:
            error = (f"replication c={c} does not divide the number of ranks P={size}: "
                     f"the grid is P/c x c, so choose c among the divisors of {size}")
        agree(self.comm, error)
        self.rank = self.comm.Get_rank()
        self.size = size
        self.block_row, self.replica = divmod(self.rank, c)
        self.row_comm = self.comm.Split(color=self.block_row, key=self.replica)
        self.col_comm = self.comm.Split(color=self.replica, key=self.block_row)

    @property
    def n_block_rows(self) -> int:
        """P/c: how many block rows the matrix is split into."""
        return self.size // self.replication

    def rank_of(self, block_row: int, replica: int) -> int:
        return block_row * self.replication + replica

    def __repr__(self) -> str:
        return (f"ProcessGrid(P={self.size}, c={self.replication}, rank={self.rank} at "
                f"(block row {self.block_row}, replica {self.replica}))")
