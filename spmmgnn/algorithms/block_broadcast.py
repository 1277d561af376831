"""What the two sparsity-oblivious algorithms share (CAGNET): stage q broadcasts the whole
block row X_q from its owner over the ranks across block rows, and every rank multiplies
its block A_iq with it; the transpose reduces A_iq^T Y_i onto the owner of q.

Bytes are counted as the logical payload: the root of a stage sends its block to its peers,
each peer receives it once (what a tree or pipeline does underneath is MPI's business).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from ..buffers import BufferPool
from ..convert import mpi_float_type
from ..local_matrix import split_block_columns
from ..stats import CommStats


def count_stage(stats: CommStats, far: np.ndarray, me: int, root: int, block_bytes: int,
                into_root: bool) -> None:
    """Logical bytes of one stage among the ranks of a communicator (``far``: per rank, on
    another node than me). Broadcast: the root sends its block to each peer, each receives
    it once. Reduce (``into_root``): the reverse."""
    if me == root:
        fan, inter = (far.size - 1) * block_bytes, int(far.sum()) * block_bytes
    else:
        fan, inter = block_bytes, block_bytes * int(far[root])
    sends = (me == root) != into_root
    stats.count_exchange(fan if sends else 0, 0 if sends else fan, 0,
                         inter if sends else 0, 0 if sends else inter)


class BlockBroadcast:
    """The stages (block columns) ``stages`` of one block row, multiplied by broadcasting."""

    def __init__(self, block_row: sp.csr_array, comm: MPI.Comm, col_offsets: np.ndarray,
                 stages: range, far: np.ndarray | None = None):
        """``far``: per rank of ``comm``, on another node (bytes by tier; None: all)."""
        self.comm = comm
        self.far = np.ones(comm.Get_size(), dtype=bool) if far is None else far
        self.stages = stages
        blocks = split_block_columns(block_row, col_offsets)
        self.blocks = {q: blocks[q] for q in stages}
        self.sizes = np.diff(col_offsets)
        self.buffers = BufferPool()

    @property
    def nnz(self) -> int:
        return sum(b.nnz for b in self.blocks.values())

    def matrices(self) -> list:
        return list(self.blocks.values())

    def _stage_buffer(self, f: int, dtype) -> np.ndarray:
        return self.buffers.get("stage", (int(self.sizes.max(initial=0)), f), dtype)

    def matmul(self, x: np.ndarray, out: np.ndarray, stats: CommStats) -> None:
        comm, me = self.comm, self.comm.Get_rank()
        mpitype, buf = mpi_float_type(x.dtype), self._stage_buffer(x.shape[1], x.dtype)
        out[...] = 0
        for q in self.stages:
            src = x if q == me else buf[: self.sizes[q]]
            with stats.timing("seconds_exchange"):
                comm.Bcast([src, mpitype], root=q)
            count_stage(stats, self.far, me, q, src.nbytes, into_root=False)
            with stats.timing("seconds_multiply"):
                self.blocks[q].matmul(src, out, accumulate=True)

    def matmul_t(self, y: np.ndarray, out: np.ndarray, stats: CommStats) -> None:
        comm, me = self.comm, self.comm.Get_rank()
        mpitype, buf = mpi_float_type(y.dtype), self._stage_buffer(y.shape[1], y.dtype)
        out[...] = 0
        for q in self.stages:
            part = buf[: self.sizes[q]]
            with stats.timing("seconds_multiply"):
                self.blocks[q].t_matmul(y, part, accumulate=False)
            with stats.timing("seconds_exchange"):
                if q == me:
                    comm.Reduce(MPI.IN_PLACE, [part, mpitype], op=MPI.SUM, root=q)
                    out += part
                else:
                    comm.Reduce([part, mpitype], None, op=MPI.SUM, root=q)
            count_stage(stats, self.far, me, q, part.nbytes, into_root=True)
