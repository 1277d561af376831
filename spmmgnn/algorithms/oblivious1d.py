"""Sparsity-oblivious 1D SpMM (CAGNET, SC'20), for uneven blocks too.

Stage q broadcasts the whole block row X_q from its owner; every rank multiplies its block
A_iq with it:  Z_i = sum_q A_iq X_q.  The transpose reduces A_iq^T Y_i onto the owner of q.
Bytes are counted as the logical payload: the root of a stage sends its block to its peers,
each peer receives it once (what a tree or pipeline does underneath is MPI's business).
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from ..convert import mpi_float_type
from ..dist import DistSpMM, register
from ..errors import agree
from ..local_matrix import split_block_columns
from ..stats import CommStats


def count_stage(stats: CommStats, size: int, root: bool, block_bytes: int,
                into_root: bool) -> None:
    """Logical bytes of one stage among ``size`` ranks. Broadcast: the root sends its block
    to size-1 peers, each receives it once. Reduce (``into_root``): the reverse."""
    fan = (size - 1) * block_bytes if root else block_bytes
    sends = root != into_root
    stats.exchanges += 1
    if sends:
        stats.bytes_sent += fan
        stats.payload_bytes_sent += fan
    else:
        stats.bytes_received += fan


@register("oblivious1d")
class Oblivious1D(DistSpMM):
    one_dimensional = True

    def __init__(self, grid, partition, block_row, **options):
        super().__init__(grid, partition, block_row, **options)
        if self.one_dimensional:
            agree(grid.comm, None if grid.replication == 1 else
                  f"{self.name} is a 1D algorithm: use replication=1 (or oblivious15d for c > 1)")
        self.stages = self.multiplied_stages()
        blocks = split_block_columns(block_row, self.offsets)
        self.blocks = {q: blocks[q] for q in self.stages}
        self.sizes = np.diff(self.offsets)
        self._buf: dict = {}

    def multiplied_stages(self) -> range:
        """Block columns this rank multiplies: all of them in 1D."""
        return range(self.grid.n_block_rows)

    def finish(self, out: np.ndarray) -> None:
        """Combine partial results across replicas: nothing to do in 1D."""

    def local_nnz(self) -> int:
        return sum(b.nnz for b in self.blocks.values())

    def _stage_buffer(self, f: int, dtype) -> np.ndarray:
        key = (f, np.dtype(dtype))
        if key not in self._buf:
            self._buf[key] = np.empty((int(self.sizes.max()), f), dtype=dtype)
        return self._buf[key]

    def _matmul(self, x: np.ndarray, out: np.ndarray) -> None:
        comm, me = self.grid.col_comm, self.grid.col_comm.Get_rank()
        mpitype, buf = mpi_float_type(x.dtype), self._stage_buffer(x.shape[1], x.dtype)
        out[...] = 0
        for q in self.stages:
            src = x if q == me else buf[: self.sizes[q]]
            with self.stats.timing("seconds_exchange"):
                comm.Bcast([src, mpitype], root=q)
            count_stage(self.stats, comm.Get_size(), q == me, src.nbytes, into_root=False)
            with self.stats.timing("seconds_multiply"):
                self.blocks[q].matmul(src, out, accumulate=True)
        self.finish(out)

    def _matmul_t(self, y: np.ndarray, out: np.ndarray) -> None:
        comm, me = self.grid.col_comm, self.grid.col_comm.Get_rank()
        mpitype, buf = mpi_float_type(y.dtype), self._stage_buffer(y.shape[1], y.dtype)
        out[...] = 0
        for q in self.stages:
            part = buf[: self.sizes[q]]
            with self.stats.timing("seconds_multiply"):
                self.blocks[q].t_matmul(y, part, accumulate=False)
            with self.stats.timing("seconds_exchange"):
                if q == me:
                    comm.Reduce(MPI.IN_PLACE, [part, mpitype], op=MPI.SUM, root=q)
                    out += part
                else:
                    comm.Reduce([part, mpitype], None, op=MPI.SUM, root=q)
            count_stage(self.stats, comm.Get_size(), q == me, part.nbytes, into_root=True)
        self.finish(out)
