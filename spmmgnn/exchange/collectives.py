"""Collectives over rows laid out by block rows of a ProcessGrid, each row counted once.

On a 1.5D grid the c replicas of a block row hold the same rows, so a sum over the whole
world counts every row c times. The rule, used by every reduction of the package that sums
over rows (``DistSpMM.dot`` / ``norm`` / ``gram`` / ``qr`` / ``allreduce``, the gradient
all-reduce of ``spmmgnn.nn``, the trainer):

* combine over ``grid.across_block_rows`` (one rank per block row, all with my replica index:
  every row once), then
* give every replica the result of replica 0 (a broadcast over ``grid.across_replicas``), so
  all P ranks hold the same bits even if a replica computed its share differently.

Rows by global id use the same communicator: a rank asks the owners among the ranks with its
replica index (``fetch_rows_by_id``: one ``Alltoallv`` of the ids, one of the rows, traffic
proportional to what is asked). The index lists travel by MPI as numpy arrays; the rows are
the grid's backend arrays and travel by the grid's link of the communicator (MPI, staged
through host memory on a torch backend and counted as ``device_host``; or torch.distributed).
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from .transport import displacements, mpi_link

REDUCE_OPS = {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}


def allreduce_rows(grid, buf: np.ndarray, op: str = "sum") -> np.ndarray:
    """Collective over ``grid.comm`` (a ``ProcessGrid``), in place: combine ``buf`` (each
    rank's share, computed from its own rows) over the ranks holding distinct rows, then hand
    replica 0's result to the other replicas. Every rank must pass the same shape and dtype.
    Returns ``buf``."""
    grid.across_block_rows.Allreduce(MPI.IN_PLACE, buf, op=REDUCE_OPS[op])
    if grid.across_replicas.Get_size() > 1:
        grid.across_replicas.Bcast(buf, root=0)
    return buf


def fetch_rows_by_id(comm: MPI.Comm, offsets: np.ndarray, local, ids: np.ndarray,
                     link=None, stats=None):
    """Collective over ``comm``, whose rank b owns global rows ``offsets[b]:offsets[b+1]``
    (``local``: this rank's rows, 2-D, the same width and dtype on every rank, an array of
    ``link``'s backend; without a link, numpy over MPI).

    Each rank asks for any global ``ids`` (any number, any order, repeats allowed) and gets
    ``local``-like rows for them in that order. One ``Alltoall`` of counts, one ``Alltoallv``
    of the distinct ids (MPI, numpy), one of the rows (``link``: what it stages is counted
    with ``stats``): traffic is proportional to the rows asked for."""
    link = mpi_link(comm) if link is None else link
    be = link.backend
    k, me = comm.Get_size(), comm.Get_rank()
    offsets = np.asarray(offsets, dtype=np.int64)
    uniq, inverse = np.unique(np.asarray(ids, dtype=np.int64), return_inverse=True)
    owner = np.searchsorted(offsets, uniq, side="right") - 1
    send_counts = np.bincount(owner, minlength=k).astype(np.int64)
    recv_counts = np.empty(k, dtype=np.int64)
    comm.Alltoall(send_counts, recv_counts)
    sdispl, rdispl = displacements(send_counts), displacements(recv_counts)
    asked = np.empty(int(recv_counts.sum()), dtype=np.int64)
    comm.Alltoallv([uniq, (send_counts, sdispl), MPI.INT64_T],
                   [asked, (recv_counts, rdispl), MPI.INT64_T])
    answer = be.take_rows(local, asked - offsets[me])
    got = be.empty((uniq.size, local.shape[1]), be.dtype(local))
    link.ialltoallv(answer, recv_counts, got, send_counts, stats, "fetch_rows", rdispl,
                    sdispl).Wait()
    return be.take_rows(got, inverse.reshape(-1))


def allgather_blocks(comm: MPI.Comm, offsets: np.ndarray, local, link=None, stats=None):
    """Collective over ``comm``: every rank's block of rows (2-D, rank b holding rows
    ``offsets[b]:offsets[b+1]``, an array of ``link``'s backend; without a link, numpy
    over MPI) stacked in rank order on every rank."""
    link = mpi_link(comm) if link is None else link
    be = link.backend
    counts = np.diff(np.asarray(offsets, dtype=np.int64))
    f = local.shape[1]
    full = be.empty((int(counts.sum()), f), be.dtype(local))
    link.allgatherv(be.contiguous(local), full, counts * f, stats, "allgather_rows")
    return full


# ------------------------------------------------------------ on backend arrays, by links
def allreduce_rows_linked(grid, buf, stats=None, name: str = "") -> None:
    """``allreduce_rows`` (sum) of the backend array ``buf`` through the grid's links (its
    transport: MPI, or NCCL / Gloo), in place: over the ranks holding distinct rows, then
    replica 0's result to the other replicas. ``stats`` counts what MPI stages."""
    grid.link(grid.across_block_rows).allreduce(buf, "sum", stats, name)
    if grid.across_replicas.Get_size() > 1:
        grid.link(grid.across_replicas).bcast(buf, 0, stats, name)


class RowsReduction:
    """``allreduce_rows_linked`` in pieces, each posted as soon as it is ready: ``post(buf)``
    starts the sum of one piece over the ranks holding distinct rows (asynchronous, so the
    caller computes on meanwhile); ``wait(whole)`` completes every posted piece, then hands
    replica 0's ``whole`` (the array holding the pieces) to the other replicas. Every rank
    must post the same pieces in the same order (the collectives' rule)."""

    def __init__(self, grid, stats=None):
        self.grid, self.stats = grid, stats
        self.link = grid.link(grid.across_block_rows)
        self.pending: list = []

    def post(self, buf, name: str = "") -> None:
        self.pending.append(self.link.iallreduce(buf, "sum", self.stats, name))

    def wait(self, whole) -> None:
        for request in self.pending:
            request.Wait()
        self.pending.clear()
        if self.grid.across_replicas.Get_size() > 1:
            self.grid.link(self.grid.across_replicas).bcast(whole, 0, self.stats, "replicas")
