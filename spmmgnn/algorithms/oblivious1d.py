"""Sparsity-oblivious 1D SpMM (CAGNET, SC'20), for uneven blocks too.

Stage q broadcasts the whole block row X_q from its owner; every rank multiplies its block
A_iq with it:  Z_i = sum_q A_iq X_q.  The transpose reduces A_iq^T Y_i onto the owner of q.
Bytes are counted as the logical payload: the root of a stage sends its block to P-1 peers,
each peer receives it once (what a tree or pipeline does underneath is MPI's business).
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from ..convert import mpi_float_type as _mpi_type
from ..dist import DistSpMM, register
from ..errors import agree
from ..local_matrix import split_block_columns


@register("oblivious1d")
class Oblivious1D(DistSpMM):
    def __init__(self, grid, partition, block_row, **options):
        super().__init__(grid, partition, block_row, **options)
        agree(grid.comm, None if grid.replication == 1 else
              f"{self.name} is a 1D algorithm: use replication=1 (or oblivious15d for c > 1)")
        self.blocks = split_block_columns(block_row, self.offsets)
        self.sizes = np.diff(self.offsets)
        self._buf: dict = {}

    def local_nnz(self) -> int:
        return sum(b.nnz for b in self.blocks)

    def _stage_buffer(self, f: int, dtype) -> np.ndarray:
        key = (f, np.dtype(dtype))
        if key not in self._buf:
            self._buf[key] = np.empty((int(self.sizes.max()), f), dtype=dtype)
        return self._buf[key]

    def _matmul(self, x: np.ndarray, out: np.ndarray) -> None:
        comm, me, size = self.grid.col_comm, self.grid.col_comm.Get_rank(), self.grid.size
        f, mpitype = x.shape[1], _mpi_type(x.dtype)
        buf = self._stage_buffer(f, x.dtype)
        for q in range(size):
            src = x if q == me else buf[: self.sizes[q]]
            with self.stats.timing("seconds_exchange"):
                comm.Bcast([src, mpitype], root=q)
            self._count_stage(q == me, int(self.sizes[q]) * f * x.itemsize, into_root=False)
            with self.stats.timing("seconds_multiply"):
                self.blocks[q].matmul(src, out, accumulate=q > 0)

    def _matmul_t(self, y: np.ndarray, out: np.ndarray) -> None:
        comm, me, size = self.grid.col_comm, self.grid.col_comm.Get_rank(), self.grid.size
        f, mpitype = y.shape[1], _mpi_type(y.dtype)
        buf = self._stage_buffer(f, y.dtype)
        for q in range(size):
            part = buf[: self.sizes[q]]
            with self.stats.timing("seconds_multiply"):
                self.blocks[q].t_matmul(y, part, accumulate=False)
            with self.stats.timing("seconds_exchange"):
                comm.Reduce([part, mpitype], [out, mpitype] if q == me else None,
                            op=MPI.SUM, root=q)
            self._count_stage(q == me, int(self.sizes[q]) * f * y.itemsize, into_root=True)

    def _count_stage(self, root: bool, block_bytes: int, into_root: bool) -> None:
        """Logical bytes of one stage. Broadcast: the root sends its block to P-1 peers, each
        peer receives it once. Reduce (``into_root``): each peer sends one block, the root
        receives P-1 of them."""
        peers = self.grid.size - 1
        st = self.stats
        st.exchanges += 1
        if root:
            moved = peers * block_bytes
            st.bytes_received += moved if into_root else 0
            st.bytes_sent += 0 if into_root else moved
            st.payload_bytes_sent += 0 if into_root else moved
        else:
            st.bytes_sent += block_bytes if into_root else 0
            st.payload_bytes_sent += block_bytes if into_root else 0
            st.bytes_received += 0 if into_root else block_bytes
