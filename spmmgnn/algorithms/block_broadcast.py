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

from ..backend.host import HOST
from ..local.split import split_block_columns
from ..runtime.stats import CommStats


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
                 stages: range, far: np.ndarray | None = None, backend=HOST, link=None):
        """``far``: per rank of ``comm``, on another node (bytes by tier; None: all);
        ``backend`` and ``link`` (``comm``'s transport): the grid's."""
        from ..exchange.transport import mpi_link

        self.comm = comm
        self.backend = backend
        self.link = mpi_link(comm, backend) if link is None else link
        self.far = np.ones(comm.Get_size(), dtype=bool) if far is None else far
        self.stages = stages
        blocks = split_block_columns(block_row, col_offsets)
        self.blocks = {q: blocks[q] for q in stages}
        self.on_backend = {q: backend.block(b) for q, b in self.blocks.items()}
        self.sizes = np.diff(col_offsets)
        self.buffers = backend.pool()

    @property
    def nnz(self) -> int:
        return sum(b.nnz for b in self.blocks.values())

    def matrices(self) -> list:
        return list(self.blocks.values())

    def blocks_on_backend(self) -> list:
        return list(self.on_backend.values())

    def _stage_buffer(self, f: int, dtype):
        return self.buffers.get("stage", (int(self.sizes.max(initial=0)), f), dtype)

    def matmul(self, x, out, stats: CommStats) -> None:
        be, link = self.backend, self.link
        me, buf = link.rank, self._stage_buffer(x.shape[1], be.dtype(x))
        out[...] = 0
        for q in self.stages:
            src = x if q == me else buf[: self.sizes[q]]
            with stats.timing("seconds_exchange"):
                link.bcast(src, q, stats, "stage")
            count_stage(stats, self.far, me, q, be.nbytes(src), into_root=False)
            with stats.timing("seconds_multiply"):
                self.on_backend[q].matmul(src, out, accumulate=True)

    def matmul_t(self, y, out, stats: CommStats) -> None:
        be, link = self.backend, self.link
        me, buf = link.rank, self._stage_buffer(y.shape[1], be.dtype(y))
        out[...] = 0
        for q in self.stages:
            part = buf[: self.sizes[q]]
            with stats.timing("seconds_multiply"):
                self.on_backend[q].t_matmul(y, part, accumulate=False)
            with stats.timing("seconds_exchange"):
                link.reduce(part, q, stats, "stage")
                if q == me:
                    out += part
            count_stage(stats, self.far, me, q, be.nbytes(part), into_root=True)
