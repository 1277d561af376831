"""The transports a grid moves its rows with: MPI (``MpiTransport``, every grid's default)
and ``torch.distributed`` (``exchange.torch_transport``: NCCL for CUDA grids, Gloo for CPU
tensors). A transport hands out one ``Link`` per communicator of its grid
(``backend.protocol.Link``): the data-plane collectives of the algorithms, on the grid's
backend arrays. Plan construction and the small agreement collectives stay on MPI.

An ``MpiLink`` gives MPI host memory: the backend's arrays themselves where MPI can read and
write them in place (numpy, CPU tensors), else the copies the backend stages
(``Backend.wire_out`` / ``wire_in`` / ``wire_landed``: pinned host buffers on CUDA, counted as
the ``device_host`` tier; the reductions are staged even where MPI takes the arrays
themselves, ``reduction=True``). Rows travel as one contiguous MPI type per row width, so counts
are rows. Over a communicator of one rank nothing travels: a staged link copies the rows
within the backend (or does nothing) and stages nothing.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from mpi4py import MPI

from ..backend.host import HOST
from ..backend.protocol import Backend

REDUCE_OPS = {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}
TRANSPORTS = ("mpi", "torch", "auto")


def displacements(counts: np.ndarray) -> np.ndarray:
    """Exclusive prefix sum: where each peer's rows start in a packed buffer (int64, the one
    helper every ``Alltoallv`` / ``Allgatherv`` of the package uses)."""
    counts = np.asarray(counts)
    d = np.zeros(counts.shape, dtype=np.int64)
    np.cumsum(counts[:-1], out=d[1:])
    return d


def mpi_type(dtype) -> MPI.Datatype:
    """The MPI datatype of a numpy dtype (the floats, bytes and integers the rows use)."""
    return MPI._typedict[np.dtype(dtype).char]


class Staged:
    """An MPI request whose received rows were staged: ``Wait()`` completes it and brings
    them into the backend array."""

    __slots__ = ("backend", "host", "recv", "reduction", "request", "stats")

    def __init__(self, request, backend, host, recv, stats, reduction: bool = False):
        self.request, self.backend, self.host, self.recv = request, backend, host, recv
        self.stats, self.reduction = stats, reduction

    def Wait(self) -> None:  # noqa: N802 (MPI's name)
        self.request.Wait()
        self.backend.wire_landed(self.host, self.recv, self.stats, self.reduction)


class MpiLink:
    """The collectives of ``comm`` on ``backend``'s arrays, by MPI."""

    transport = "mpi"

    def __init__(self, comm: MPI.Comm, backend: Backend = HOST):
        self.comm, self.backend = comm, backend
        self.size, self.rank = comm.Get_size(), comm.Get_rank()
        # the backend's arrays are MPI's own buffers (numpy): no staging, no wrappers
        self.plain = backend.mpi_native
        # one rank and staged: nothing crosses ranks, so nothing is staged (the host path
        # keeps its MPI calls as they were)
        self.alone = self.size == 1 and not self.plain
        self._types: dict[int, MPI.Datatype] = {}

    def row_type(self, row_bytes: int) -> MPI.Datatype:
        """A committed contiguous type of ``row_bytes`` bytes (made once per width)."""
        t = self._types.get(row_bytes)
        if t is None:
            t = self._types[row_bytes] = MPI.BYTE.Create_contiguous(row_bytes).Commit()
        return t

    def row_specs(self, send, send_counts, recv, recv_counts, send_displs=None,
                  recv_displs=None) -> tuple[list, list]:
        """The two buffer specifications of an ``Alltoallv`` of whole rows (host arrays)."""
        row_bytes = int(send.shape[1] * send.itemsize) if send.ndim == 2 else send.itemsize
        rt = self.row_type(row_bytes)
        sd = displacements(send_counts) if send_displs is None else send_displs
        rd = displacements(recv_counts) if recv_displs is None else recv_displs
        return [send, (send_counts, sd), rt], [recv, (recv_counts, rd), rt]

    def _out(self, x, stats, name: str, reduction: bool = False):
        if self.plain:
            return x
        host = self.backend.wire_out(x, stats, name, reduction)
        self.backend.wire_ready(host)
        return host

    def ialltoallv(self, send, send_counts, recv, recv_counts, stats=None, name: str = "",
                   send_displs=None, recv_displs=None):
        """Post the exchange of whole rows (counts in rows); ``Wait()`` the result."""
        if self.plain:
            return self.comm.Ialltoallv(*self.row_specs(send, send_counts, recv, recv_counts,
                                                        send_displs, recv_displs))
        if self.alone:
            sd = 0 if send_displs is None else int(send_displs[0])
            rd = 0 if recv_displs is None else int(recv_displs[0])
            n = int(recv_counts[0])
            recv[rd:rd + n] = send[sd:sd + n]
            return MPI.REQUEST_NULL
        hs = self._out(send, stats, name + ":send")
        hr = self.backend.wire_in(recv, stats, name + ":recv")
        request = self.comm.Ialltoallv(*self.row_specs(hs, send_counts, hr, recv_counts,
                                                       send_displs, recv_displs))
        return Staged(request, self.backend, hr, recv, stats)

    def alltoallv(self, send, send_counts, recv, recv_counts, stats=None,
                  name: str = "") -> None:
        """Blocking exchange of flat arrays, counts in elements."""
        if self.alone:
            self._copy_alone(send, recv, recv_counts)
            return
        hs = self._out(send, stats, name + ":send")
        hr = recv if self.plain else self.backend.wire_in(recv, stats, name + ":recv")
        t = mpi_type(hs.dtype)
        sc, rc = np.asarray(send_counts, np.int64), np.asarray(recv_counts, np.int64)
        self.comm.Alltoallv([hs, (sc, displacements(sc)), t], [hr, (rc, displacements(rc)), t])
        if not self.plain:
            self.backend.wire_landed(hr, recv, stats)

    def _in_place(self, buf, stats, name: str, run) -> None:
        """Run the reduction ``run(host)`` on host memory holding ``buf``'s values, then
        bring the result back into ``buf``."""
        if self.plain:
            run(buf)
            return
        host = self._out(buf, stats, name, reduction=True)
        run(host)
        self.backend.wire_landed(host, buf, stats, reduction=True)

    def _copy_alone(self, send, recv, counts) -> None:
        """One rank's part of a flat collective (``counts[0]`` elements): ``send`` into
        ``recv`` on the backend, nothing staged (both contiguous, as MPI needs them)."""
        n = int(counts[0])
        recv.reshape(-1)[:n] = send.reshape(-1)[:n]

    def bcast(self, buf, root: int, stats=None, name: str = "") -> None:
        if self.alone:  # the root's block is already where it goes
            return
        if self.plain:
            self.comm.Bcast(buf, root=root)
            return
        if self.rank == root:
            self.comm.Bcast(self._out(buf, stats, name), root=root)
            return
        host = self.backend.wire_in(buf, stats, name + ":recv")
        self.comm.Bcast(host, root=root)
        self.backend.wire_landed(host, buf, stats)

    def reduce(self, buf, root: int, stats=None, name: str = "") -> None:
        if self.alone:  # the sum of one rank's part is that part, in place
            return
        if self.rank == root:
            self._in_place(buf, stats, name, lambda h: self.comm.Reduce(
                MPI.IN_PLACE, h, op=MPI.SUM, root=root))
        else:
            self.comm.Reduce(self._out(buf, stats, name, reduction=True), None, op=MPI.SUM,
                             root=root)

    def allreduce(self, buf, op: str = "sum", stats=None, name: str = "") -> None:
        if self.alone:
            return
        self._in_place(buf, stats, name, lambda h: self.comm.Allreduce(
            MPI.IN_PLACE, h, op=REDUCE_OPS[op]))

    def reduce_scatter(self, send, recv, counts, stats=None, name: str = "") -> None:
        """Sum ``send`` over the ranks; rank q keeps elements of block q (``counts`` in
        elements) in ``recv``. ``send`` may be overwritten."""
        if self.alone:
            self._copy_alone(send, recv, counts)
            return
        hs = self._out(send, stats, name + ":send", reduction=True)
        hr = recv if self.plain else self.backend.wire_in(recv, stats, name + ":recv", True)
        t = mpi_type(hs.dtype)
        self.comm.Reduce_scatter([hs, t], [hr, t], _counts(counts), op=MPI.SUM)
        if not self.plain:
            self.backend.wire_landed(hr, recv, stats, reduction=True)

    def allgatherv(self, send, recv, counts, stats=None, name: str = "") -> None:
        """Every rank's ``send`` (``counts[q]`` elements from rank q) into ``recv``."""
        if self.alone:
            self._copy_alone(send, recv, counts)
            return
        hs = self._out(send, stats, name + ":send")
        hr = recv if self.plain else self.backend.wire_in(recv, stats, name + ":recv")
        t = mpi_type(hs.dtype)
        counts = np.asarray(counts, np.int64)
        self.comm.Allgatherv([hs, t], [hr, (counts, displacements(counts)), t])
        if not self.plain:
            self.backend.wire_landed(hr, recv, stats)

    def iallreduce(self, buf, op: str = "sum", stats=None, name: str = ""):
        """Post the all-reduce of ``buf`` in place (``Wait()`` before touching ``buf``): MPI's
        ``Iallreduce`` on ``buf`` itself, or on its staged host copy, brought back by
        ``Wait()``."""
        if self.plain:
            return self.comm.Iallreduce(MPI.IN_PLACE, buf, op=REDUCE_OPS[op])
        if self.alone:
            return MPI.REQUEST_NULL
        host = self._out(buf, stats, name, reduction=True)
        request = self.comm.Iallreduce(MPI.IN_PLACE, host, op=REDUCE_OPS[op])
        return Staged(request, self.backend, host, buf, stats, reduction=True)

    def ireduce_scatter(self, send, recv, counts, stats=None, name: str = ""):
        """Post ``reduce_scatter`` (``counts`` in elements); ``Wait()`` before reading
        ``recv``. ``send`` must stay untouched until then."""
        if self.alone:
            self._copy_alone(send, recv, counts)
            return MPI.REQUEST_NULL
        hs = self._out(send, stats, name + ":send", reduction=True)
        hr = recv if self.plain else self.backend.wire_in(recv, stats, name + ":recv", True)
        t = mpi_type(hs.dtype)
        request = self.comm.Ireduce_scatter([hs, t], [hr, t], _counts(counts),
                                            op=MPI.SUM)
        return request if self.plain else Staged(request, self.backend, hr, recv, stats,
                                                 reduction=True)


class MpiTransport:
    """Every communicator's collectives by MPI (``transport="mpi"``)."""

    name = "mpi"

    def __init__(self, backend: Backend = HOST):
        self.backend = backend
        self._links: list[tuple[MPI.Comm, MpiLink]] = []

    def link(self, comm: MPI.Comm) -> MpiLink:
        for known, link in self._links:
            if known is comm:
                return link
        link = MpiLink(comm, self.backend)
        self._links.append((comm, link))
        return link

    def describe(self) -> str:
        return "mpi"

    def close(self) -> None:
        pass


def mpi_link(comm: MPI.Comm, backend: Backend = HOST) -> MpiLink:
    """A link of ``comm`` outside any grid (a plan built on its own, in tests and tools)."""
    return MpiLink(comm, backend)


def _counts(counts) -> Any:
    """A reduce-scatter's counts as int64 (mpi4py takes any integer sequence; its stubs say
    ``Sequence[int]``)."""
    return np.asarray(counts, np.int64)
