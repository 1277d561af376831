"""The P/c x c process grid: P/c block rows, each replicated on c ranks.

Rank r sits at (block row i, replica j) with ``i = r // c`` and ``j = r % c``. Like the
named dimensions of a DTensor ``DeviceMesh``, the grid has two dimensions, ``"block_row"``
(size P/c) and ``"replica"`` (size c), and one communicator along each:

* ``across_block_rows``: one rank per block row, all with my replica index -- where halo
  exchanges and block broadcasts happen (the whole world in 1D);
* ``across_replicas``: the c replicas of my block row -- where 1.5D partial results are
  all-reduced (a single rank in 1D).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mpi4py import MPI

from .errors import agree

DIMS = ("block_row", "replica")


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
        if size > 1:  # a different c on some rank would split the world inconsistently
            mine = c if error is None else -1
            low, high = (self.comm.allreduce(mine, op=op) for op in (MPI.MIN, MPI.MAX))
            if error is None and low != high:
                error = (f"the ranks ask for different replication factors (c from {low} to "
                         f"{high}); every rank must build the grid with the same c")
        agree(self.comm, error)
        self.rank = self.comm.Get_rank()
        self.size = size
        self.block_row, self.replica = divmod(self.rank, c)
        self.across_replicas = self.comm.Split(color=self.block_row, key=self.replica)
        self.across_block_rows = self.comm.Split(color=self.replica, key=self.block_row)

    def comm_along(self, dim: str) -> MPI.Comm:
        """The communicator along grid dimension ``dim`` ("block_row" or "replica")."""
        if dim == "block_row":
            return self.across_block_rows
        if dim == "replica":
            return self.across_replicas
        raise ValueError(f"grid dimensions are {DIMS}, got {dim!r}")

    @property
    def shape(self) -> tuple[int, int]:
        """(P/c, c), in the order of ``DIMS``."""
        return self.n_block_rows, self.replication

    @property
    def n_block_rows(self) -> int:
        """P/c: how many block rows the matrix is split into."""
        return self.size // self.replication

    def rank_of(self, block_row: int, replica: int) -> int:
        return block_row * self.replication + replica

    def __repr__(self) -> str:
        return (f"ProcessGrid(P={self.size}, c={self.replication}, rank={self.rank} at "
                f"(block row {self.block_row}, replica {self.replica}))")
