"""Rows shared inside a node through an MPI-3 shared-memory window instead of messages.

A ``SharedRoute`` does what a ``halo.Route`` on a node communicator does (one ``Alltoallv``
of indexed rows, forward and backward) without MPI moving a byte: each rank writes the rows
it would send into its own segment of a window (``MPI.Win.Allocate_shared``) and every rank
then reads what it would have received straight out of its peers' segments, in the order the
``Alltoallv`` would have delivered it (so the results are the message route's, bit for bit).

Synchronisation per call: the writers store, ``Win.Sync`` + node ``Barrier`` + ``Win.Sync``
(the window stays under ``Lock_all``), then the readers load. Each window has two halves used
by turns, so a writer may store call k + 2 only after every rank passed the barrier of call
k + 1, which a reader reaches only after it finished reading call k: nobody overwrites rows
before their readers are done, with one barrier per call. One window per direction, dtype,
row width and ``slot`` (exchanges in flight at once use separate slots).

Only ranks that really share memory may use it (``shares_memory``): a simulated node
(``ranks_per_node=K``) is a ``Split`` of the machine's ranks, and each gets its own window.
Windows are freed by ``close`` (collective) or at ``MPI_Finalize``.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from ..local import kernels
from ..runtime.machine import shared_node
from ..runtime.wire import allgather_json
from .halo import NO_INDEX, Route, displacements


def shares_memory(comm: MPI.Comm) -> bool:
    """Collective: True when every rank of ``comm`` can map the others' memory."""
    with shared_node(comm) as sub:
        together = sub.Get_size() == comm.Get_size()
    return bool(comm.allreduce(int(together), op=MPI.MIN))


class Window:
    """One shared window of ``rows[q]`` rows x ``f`` per rank q, twice: half h is
    ``array[h * total : (h + 1) * total]``, every rank's segment in rank order, so a row's
    place inside a half (``start[q]`` + its row) is the same in both halves."""

    def __init__(self, comm: MPI.Comm, rows: np.ndarray, f: int, dtype):
        dtype = np.dtype(dtype)
        self.comm, self.me, self.rows = comm, comm.Get_rank(), rows
        self.start = displacements(rows)               # first row of each rank's segment
        self.total = int(rows.sum())
        size = 2 * self.total * f * dtype.itemsize
        self.win = MPI.Win.Allocate_shared(size if self.me == 0 else 0, 1, comm=comm)
        buf, _ = self.win.Shared_query(0)
        self.array = np.frombuffer(buf, dtype=dtype, count=size // dtype.itemsize
                                   ).reshape(-1, f) if size else np.zeros((0, f), dtype)
        self.win.Lock_all(MPI.MODE_NOCHECK)
        self.calls = 0

    def half(self, half: int) -> np.ndarray:
        """All ranks' rows of this ``half``."""
        return self.array[half * self.total:(half + 1) * self.total]

    def segment(self, half: int) -> np.ndarray:
        """My rows of this ``half``."""
        lo = half * self.total + int(self.start[self.me])
        return self.array[lo:lo + int(self.rows[self.me])]

    def offsets(self, peer: np.ndarray, half: int) -> np.ndarray:
        """Where row 0 of each ``peer``'s segment of ``half`` sits in ``array``."""
        return half * self.total + self.start[peer]

    def sync(self) -> None:
        """Collective: what every rank stored is visible to every rank."""
        self.win.Sync()
        self.comm.Barrier()
        self.win.Sync()

    def close(self) -> None:
        self.win.Unlock_all()
        self.win.Free()


class SharedRoute:
    """A ``Route`` on a communicator of ranks sharing memory, run through windows (module
    docstring). Collective to build (two ``Alltoall`` and two ``allgather``)."""

    def __init__(self, route: Route):
        self.route = route
        comm = route.comm
        peer = np.arange(comm.Get_size())
        where_send = np.empty_like(route.send_displs)   # [q]: q.send_displs[me]
        where_recv = np.empty_like(route.recv_displs)   # [q]: q.recv_displs[me]
        comm.Alltoall(route.send_displs, where_send)
        comm.Alltoall(route.recv_displs, where_recv)
        rows = {True: np.array(allgather_json(comm, int(route.n_send)), dtype=np.int64),
                False: np.array(allgather_json(comm, int(route.n_recv)), dtype=np.int64)}
        # forward: I read from peer q its rows for me, recv_counts[q] of them; backward: the
        # rows q returns for what I sent it, send_counts[q] of them
        self._plan = {}
        for forward, counts, displs, where in ((True, route.recv_counts, route.recv_displs,
                                                where_send),
                                               (False, route.send_counts, route.send_displs,
                                                where_recv)):
            who = np.repeat(peer, counts)
            within = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(displs, counts)
            self._plan[forward] = (rows[forward], who, np.repeat(where, counts) + within)
        me = comm.Get_rank()
        self._others = {d: int(self._plan[d][1].size - np.count_nonzero(self._plan[d][1] == me))
                        for d in (True, False)}
        self.windows: dict[tuple, tuple[Window, list[np.ndarray]]] = {}
        # no rank of the node moves a row on this route: a call is a no-op (no barrier)
        self.idle = not comm.allreduce(route.n_send + route.n_recv)

    def _window(self, forward: bool, f: int, dtype, slot: int):
        key = (forward, f, np.dtype(dtype).str, slot)
        if key not in self.windows:
            rows, who, within = self._plan[forward]
            w = Window(self.route.comm, rows, f, dtype)
            self.windows[key] = (w, [w.offsets(who, h) + within for h in (0, 1)])
        return self.windows[key]

    def segment(self, forward: bool, f: int, dtype, slot: int = 0) -> np.ndarray:
        """Collective the first time (per direction, width, dtype, slot): my segment of the
        next ``exchange``, to write its rows in place (then ``exchange(None, ...)``)."""
        if self.idle:
            return np.zeros((0, f), dtype=dtype)
        window, _ = self._window(forward, f, dtype, slot)
        return window.segment(window.calls % 2)

    def exchange(self, src: np.ndarray | None, idx: np.ndarray | None, forward: bool,
                 slot: int = 0, f: int = 0, dtype=None) -> tuple[np.ndarray, np.ndarray]:
        """Collective: publish ``src[idx]`` (``idx`` None: ``src``, already in the order of
        my segment; ``src`` None: ``segment``'s rows, written there, of width ``f`` and
        ``dtype``) and return ``(rows, index)``: ``rows[index]`` is what the ``Alltoallv``
        (``forward`` or backward) would have delivered to me, valid until the next call on
        the same slot after the next. Counted as one exchange of no message bytes; the rows
        read from other ranks go to ``stats.bytes_shared_read``."""
        route = self.route
        if src is not None:
            f, dtype = src.shape[1], src.dtype
        dtype = np.dtype(dtype)
        if self.idle:
            route.stats.count_exchange(0, 0, legs=route.legs)
            return np.zeros((0, f), dtype=dtype), NO_INDEX
        window, index = self._window(forward, f, dtype, slot)
        half = window.calls % 2
        window.calls += 1
        stats = route.stats
        with stats.timing("seconds_exchange"):
            seg = window.segment(half)
            if src is None:
                pass
            elif idx is None:
                seg[...] = src
            elif seg.shape[0]:
                kernels.gather_rows(src, idx, seg)
            window.sync()
        stats.count_exchange(0, 0, legs=route.legs)
        stats.bytes_shared_read += self._others[forward] * f * dtype.itemsize
        return window.array, index[half]

    def close(self) -> None:
        """Collective: free the windows."""
        for window, _ in self.windows.values():
            window.close()
        self.windows.clear()
