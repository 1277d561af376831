"""The ``torch.distributed`` transport (``ProcessGrid(transport="torch")``): NCCL for CUDA
grids, Gloo for CPU tensors and numpy arrays, one process group per communicator of the grid
(its world, each dimension, the block rows and the replicas), as ``DeviceMesh.get_group(dim)``.

Bootstrap from the MPI communicator, so ``mpiexec`` and ``srun`` need no second launcher:
rank 0 opens a ``TCPStore`` on a free port of its host (``SPMMGNN_TORCH_ADDR`` names the
address other ranks reach it by; default: its host name's address) and broadcasts address
and port over MPI; every rank then joins the default group over the grid's ranks, and the
groups of the grid's communicators are made in one agreed order. A process has one default
group, so every torch-transport grid of a process spans the same ranks (a second grid over
other ranks is refused).

The exchanges: the halo routes are one uneven ``all_to_all_single`` of whole rows, posted
asynchronously and finished by ``Wait()`` after the local product (as on the MPI path); the
broadcasts and reductions of the stage loops ``broadcast`` / ``reduce``; the replicas' and the
gradients' sums ``all_reduce``; the 3D layers' reduce-scatter ``reduce_scatter_single`` (a
``reduce`` per block when the blocks are uneven) and all-gather ``all_gather_single`` (a
``broadcast`` per block when uneven). The counters count the same logical bytes as on MPI;
nothing is staged, so the ``device_host`` tier stays 0.
"""

from __future__ import annotations

import atexit
import datetime
import os
import socket
import sys

import numpy as np
from mpi4py import MPI

from ..backend.protocol import Backend
from ..runtime.errors import agree
from ..runtime.wire import allgather_json, bcast_json

ADDR_ENV = "SPMMGNN_TORCH_ADDR"
TIMEOUT = datetime.timedelta(minutes=10)
_WORLD: dict = {}  # the process's default group: {"ranks": P, "backend": name}


def _address() -> str:
    """The address other ranks reach this host's store by."""
    addr = os.environ.get(ADDR_ENV, "").strip()
    if addr:
        return addr
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def init_world(comm: MPI.Comm, name: str) -> str | None:
    """Collective over ``comm``: the default process group over its ranks (once per
    process). Returns the reason it cannot (None: ready)."""
    import torch.distributed as dist

    size, rank = comm.Get_size(), comm.Get_rank()
    if dist.is_initialized():
        same = dist.get_world_size() == size and dist.get_rank() == rank
        if not same:
            return ("transport='torch': this process already joined a torch.distributed "
                    f"group of {dist.get_world_size()} ranks (rank {dist.get_rank()}); a "
                    f"grid over {size} ranks cannot use it: build every torch-transport grid "
                    "over the same communicator")
        if _WORLD.get("backend") not in (None, name):
            return (f"transport='torch': this process's group runs {_WORLD['backend']}, this "
                    f"grid needs {name}: keep one device kind per process")
        return None
    error, store, where = None, None, None
    if rank == 0:
        try:
            from torch.distributed import TCPStore

            store = TCPStore(_address() if size > 1 else "127.0.0.1", 0, size, True,
                             timeout=TIMEOUT, wait_for_workers=False)
            where = [_address() if size > 1 else "127.0.0.1", int(store.port)]
        except Exception as exc:  # noqa: BLE001 (any failure to listen is the one error)
            error = f"transport='torch': rank 0 could not open its rendezvous store: {exc}"
    where = bcast_json(comm, where, root=0)
    agree(comm, error)
    try:
        if rank != 0:
            from torch.distributed import TCPStore

            store = TCPStore(where[0], where[1], size, False, timeout=TIMEOUT)
        dist.init_process_group(name, store=store, rank=rank, world_size=size,
                                timeout=TIMEOUT)
    except Exception as exc:  # noqa: BLE001
        error = (f"transport='torch': joining the {name} group at {where[0]}:{where[1]} "
                 f"failed on rank {rank}: {exc} (set {ADDR_ENV} to an address every rank "
                 "reaches)")
    agree(comm, error)
    _WORLD.update(ranks=size, backend=name)
    atexit.register(_leave_world)
    return None


def _leave_world() -> None:
    """At exit, while the interpreter is whole: destroy the default group this module made.
    Left to the interpreter's teardown, Gloo's worker threads are destroyed still joinable
    and the process dies of ``terminate called without an active exception`` (now and then,
    on a loaded machine). Skipped when the process ends on an error: a rank whose peers are
    gone could wait in the teardown, where exiting lets ``mpiexec`` end the job."""
    import torch.distributed as dist

    from ..runtime.abort import abort_pending

    if abort_pending() or getattr(sys, "last_value", None) is not None:
        return
    if dist.is_initialized():
        dist.destroy_process_group()
    _WORLD.clear()


class TorchRequest:
    """A posted ``torch.distributed`` work; ``Wait()`` (MPI's spelling) completes it."""

    __slots__ = ("work",)

    def __init__(self, work):
        self.work = work

    def Wait(self) -> None:  # noqa: N802
        if self.work is not None:
            self.work.wait()


class Landing:
    """Several posted works completed together, then ``land()`` (a copy into place)."""

    __slots__ = ("land", "works")

    def __init__(self, works: list, land):
        self.works, self.land = works, land

    def Wait(self) -> None:  # noqa: N802
        for work in self.works:
            work.wait()
        self.land()


class TorchLink:
    """The collectives of one communicator of the grid over its process group (``group``
    None: a communicator of one rank, where every collective is local)."""

    transport = "torch"

    def __init__(self, group, members: list[int], rank: int, backend: Backend):
        self.group, self.members, self.backend = group, members, backend
        self.size, self.rank = len(members), rank

    def _t(self, x):
        return self.backend.as_torch(x)

    def ialltoallv(self, send, send_counts, recv, recv_counts, stats=None, name: str = "",
                   send_displs=None, recv_displs=None):
        """Post the exchange of whole rows (counts in rows); ``Wait()`` the result."""
        import torch.distributed as dist

        s, r = self._t(send), self._t(recv)
        if self.group is None:
            r.copy_(s)
            return TorchRequest(None)
        work = dist.all_to_all_single(r, s, [int(c) for c in recv_counts],
                                      [int(c) for c in send_counts], group=self.group,
                                      async_op=True)
        return TorchRequest(work)

    def alltoallv(self, send, send_counts, recv, recv_counts, stats=None,
                  name: str = "") -> None:
        self.ialltoallv(send, send_counts, recv, recv_counts, stats, name).Wait()

    def bcast(self, buf, root: int, stats=None, name: str = "") -> None:
        import torch.distributed as dist

        if self.group is not None:
            dist.broadcast(self._t(buf), group=self.group, group_src=int(root))

    def reduce(self, buf, root: int, stats=None, name: str = "") -> None:
        import torch.distributed as dist

        if self.group is not None:
            dist.reduce(self._t(buf), group=self.group, group_dst=int(root))

    def allreduce(self, buf, op: str = "sum", stats=None, name: str = "") -> None:
        import torch.distributed as dist

        if self.group is not None:
            ops = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX,
                   "min": dist.ReduceOp.MIN}
            dist.all_reduce(self._t(buf), op=ops[op], group=self.group)

    def iallreduce(self, buf, op: str = "sum", stats=None, name: str = ""):
        """Post ``all_reduce`` of ``buf`` (``async_op``); ``Wait()`` before touching it."""
        import torch.distributed as dist

        if self.group is None:
            return TorchRequest(None)
        ops = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}
        return TorchRequest(dist.all_reduce(self._t(buf), op=ops[op], group=self.group,
                                            async_op=True))

    def reduce_scatter(self, send, recv, counts, stats=None, name: str = "") -> None:
        """``send`` summed over the ranks, block q (``counts`` in elements) kept by rank q;
        ``send`` is overwritten."""
        import torch.distributed as dist

        s, r = self._t(send).reshape(-1), self._t(recv).reshape(-1)
        if self.group is None:
            r.copy_(s)
            return
        counts = [int(c) for c in counts]
        if len(set(counts)) == 1:
            _reduce_scatter(dist)(r, s, group=self.group)
            return
        start = np.concatenate([[0], np.cumsum(counts)])
        for q in range(self.size):  # uneven blocks: one reduce per owner
            dist.reduce(s[int(start[q]):int(start[q + 1])], group=self.group, group_dst=q)
        r.copy_(s[int(start[self.rank]):int(start[self.rank + 1])])

    def ireduce_scatter(self, send, recv, counts, stats=None, name: str = ""):
        """Post ``reduce_scatter`` (``async_op``; uneven blocks: one ``reduce`` per owner,
        my block copied into ``recv`` by ``Wait()``); ``send`` is overwritten."""
        import torch.distributed as dist

        s, r = self._t(send).reshape(-1), self._t(recv).reshape(-1)
        if self.group is None:
            r.copy_(s)
            return TorchRequest(None)
        counts = [int(c) for c in counts]
        if len(set(counts)) == 1:
            return TorchRequest(_reduce_scatter(dist)(r, s, group=self.group, async_op=True))
        start = np.concatenate([[0], np.cumsum(counts)])
        works = [dist.reduce(s[int(start[q]):int(start[q + 1])], group=self.group,
                             group_dst=q, async_op=True) for q in range(self.size)]
        mine = s[int(start[self.rank]):int(start[self.rank + 1])]
        return Landing(works, lambda: r.copy_(mine))

    def allgatherv(self, send, recv, counts, stats=None, name: str = "") -> None:
        import torch.distributed as dist

        s, r = self._t(send).reshape(-1), self._t(recv).reshape(-1)
        if self.group is None:
            r.copy_(s)
            return
        counts = [int(c) for c in counts]
        if len(set(counts)) == 1:
            _all_gather(dist)(r, s, group=self.group)
            return
        start = np.concatenate([[0], np.cumsum(counts)])
        for q in range(self.size):  # uneven blocks: one broadcast per owner
            block = r[int(start[q]):int(start[q + 1])]
            if q == self.rank:
                block.copy_(s)
            dist.broadcast(block, group=self.group, group_src=q)


class TorchTransport:
    """``torch.distributed`` for every communicator of a grid (``transport="torch"``);
    collective over ``comms[0]`` (the grid's world) to build."""

    name = "torch"

    def __init__(self, comms: list[MPI.Comm], backend: Backend):
        import torch.distributed as dist

        self.backend = backend
        self.dist_backend = backend.dist_backend
        world = comms[0]
        agree(world, init_world(world, self.dist_backend))
        me = world.Get_rank()
        # each communicator's members as world ranks; every rank makes every group of more
        # than one rank in the same (sorted) order, as new_group requires
        mine = [tuple(int(r) for r in c.allgather(me)) for c in comms]
        every = sorted({tuple(g) for per_rank in allgather_json(world, [list(m) for m in mine])
                        for g in per_rank if len(g) > 1})
        groups = {g: dist.new_group(list(g), backend=self.dist_backend) for g in every}
        self._links = [(c, TorchLink(groups.get(m), list(m), c.Get_rank(), backend))
                       for c, m in zip(comms, mine, strict=True)]

    def link(self, comm: MPI.Comm) -> TorchLink:
        for known, link in self._links:
            if known is comm:
                return link
        raise ValueError("transport='torch': this communicator is not one of the grid's "
                         "(comm, its dimensions, block rows, replicas)")

    def describe(self) -> str:
        return f"torch.distributed ({self.dist_backend})"

    def close(self) -> None:
        pass


def _reduce_scatter(dist):
    """torch's reduce-scatter of one flat tensor: ``reduce_scatter_single`` where torch has
    it (``reduce_scatter_tensor`` warns on every call from torch 2.13 on)."""
    return getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def _all_gather(dist):
    """torch's all-gather into one flat tensor: ``all_gather_single`` where torch has it."""
    return getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
