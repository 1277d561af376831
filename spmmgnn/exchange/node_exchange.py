"""The node-aware exchange: per call, a row that ranks of node B need from node A crosses the
network once, whatever the number of ranks of B that need it.

The flat halo plan (``halo.HaloPlan``) sends every rank the rows it needs straight from their
owners, so a row three ranks of node B need crosses A -> B three times. ``NodePlan`` has the
same verbs (``start_bcast`` / ``start_reduce`` and one ``finish``) and moves the rows in three
legs, each a ``halo.Route`` (Bienz, Gropp and Olson's node-aware SpMV; SHIRO's hierarchical
strategy):

1. *gather inside A* (node communicator): each owner sends the rows node B needs of it to the
   rank of A that carries them to B (``nodes.carriers``: node pairs spread round robin over
   the node's ranks, split into lanes when a node has more ranks than there are other
   nodes); the rows my own node's ranks need of me go to them in the same message, and never
   leave the node again;
2. *between nodes* (the exchange's communicator): each carrier sends the distinct rows of
   its lane of (A, B) once, to B's carrier of that lane; this is the only leg that crosses
   the network, and the only one a codec compresses;
3. *distribute inside B* (node communicator): that rank hands each rank of B the rows it
   asked for.

The reduce (``A^T Y``, pre-aggregation, fold) runs the legs backwards: the partial rows of a
node are summed inside the node first (leg 3 backwards adds them at the carrier of B), so one
partial row per (row, node) crosses; the owners add what arrives as the flat plan does. A
bcast gives bitwise the flat plan's rows; a reduce sums in another order, so it equals the
flat plan's result to rounding. The inter-node leg is posted by ``start_*`` and finished by
``finish``, so the product of the owned block hides the slow leg; the two intra-node legs
are blocking (fast memory copies).

When the ranks of a node share memory (``shared.shares_memory``; a simulated node of
``ranks_per_node=K`` on one machine is a ``Split`` of it), the two intra-node legs send no
message: each runs through an MPI-3 shared-memory window (``shared.SharedRoute``), the
writers storing the rows their messages would carry and the readers gathering them straight
into the leg's destination (the ghost rows, leg 2's send buffer, the sums of a reduce), in
the messages' order, so the results are bitwise those of the message legs. Only the
inter-node leg is counted in ``bytes_sent``; ``bytes_sent_by_tier["intra"]`` stays 0 and the
rows read out of the windows are ``bytes_shared_read``. ``shared=False`` keeps the messages.

``exchange.auto_plan`` holds both plans and picks one per call, and builds the plan an
algorithm's ``exchange=`` option asks for.
"""

from __future__ import annotations

import time

import numpy as np
from mpi4py import MPI

from ..local import kernels
from ..local.codecs import Codec
from ..local.hashing import mix64
from ..runtime.errors import agree
from ..runtime.stats import CommStats
from .halo import NO_INDEX, HaloPlan, Route, check_ghosts, displacements, encode_rows
from .nodes import NodeMap, carriers
from .shared import SharedRoute, Window, shares_memory


def _alltoallv_ids(comm: MPI.Comm, ids: np.ndarray, counts: np.ndarray):
    """Send int64 ids grouped by peer (``counts``); returns (what arrived, counts per peer)."""
    got_counts = np.empty_like(counts)
    comm.Alltoall(counts, got_counts)
    got = np.empty(int(got_counts.sum()), dtype=np.int64)
    comm.Alltoallv([np.ascontiguousarray(ids, dtype=np.int64), (counts, displacements(counts)),
                    MPI.INT64_T], [got, (got_counts, displacements(got_counts)), MPI.INT64_T])
    return got, got_counts


def locate(haystack: np.ndarray, needles: np.ndarray) -> np.ndarray:
    """Positions of ``needles`` in ``haystack`` (unique values, any order; all present)."""
    order = np.argsort(haystack, kind="stable")
    return order[np.searchsorted(haystack[order], needles)].astype(np.int64)


def peers(counts_out: np.ndarray, counts_in: np.ndarray, me: int) -> int:
    """Messages of one step: peers with rows, sent or received, myself excluded."""
    out, got = counts_out > 0, counts_in > 0
    out[me] = got[me] = False
    return int(max(out.sum(), got.sum()))


def _same_start(a: np.ndarray, b: np.ndarray) -> bool:
    return a.__array_interface__["data"][0] == b.__array_interface__["data"][0]


class NodePlan:
    """The node-aware halo plan (module docstring); collective over ``comm`` to build, with
    the arguments of ``HaloPlan`` and ``nodes`` (a ``NodeMap`` of ``comm``, required)."""

    exchange = "node"

    def __init__(self, comm: MPI.Comm, owner_offsets: np.ndarray, ghost_ids: np.ndarray,
                 stats: CommStats | None = None, codec: Codec | None = None,
                 codec_backward: Codec | None = None, seed: int = 0,
                 stream: int | None = None, nodes: NodeMap | None = None,
                 shared: bool | None = None, in_place: bool | None = None):
        self.comm = comm
        self.stats = CommStats() if stats is None else stats
        self.codec, self.codec_backward = codec, codec_backward
        size, me = comm.Get_size(), comm.Get_rank()
        self._key_base = mix64(seed, me if stream is None else stream)
        offsets, ghost_ids, self.recv_counts = check_ghosts(comm, owner_offsets, ghost_ids)
        self.send_counts = np.empty(size, dtype=np.int64)     # as the flat plan's
        comm.Alltoall(self.recv_counts, self.send_counts)
        self.nodes = nodes = NodeMap.shared(comm) if nodes is None else nodes
        self.ghost_ids, self.n_ghost = ghost_ids, int(ghost_ids.size)
        local = nodes.local_comm()
        mine = nodes.members(nodes.my_node)          # local rank i = comm rank mine[i]
        L = mine.size
        group = np.zeros(size, dtype=np.int64)       # one communicator
        owner = np.searchsorted(offsets, ghost_ids, side="right") - 1
        direct = nodes.node[owner] == nodes.my_node
        # -- I ask my node's carrier of each row (``nodes.carriers``) for it
        far = np.flatnonzero(~direct)
        _, t = carriers(group, nodes.node, owner[far], nodes.my_node)
        carrier = np.searchsorted(mine, t)           # its local rank
        order = np.argsort(carrier, kind="stable")
        self.pos_far = far[order]                    # where leg 3's rows land, in order
        asked, asked_counts = _alltoallv_ids(local, ghost_ids[self.pos_far],
                                             np.bincount(carrier, minlength=L).astype(np.int64))
        # -- as a carrier: the distinct rows of each (A, my node), in order of A's carrier
        wanted = np.unique(asked)
        sender, _ = carriers(group, nodes.node,
                             np.searchsorted(offsets, wanted, side="right") - 1, nodes.my_node)
        order = np.lexsort((wanted, sender))
        recv2_ids = wanted[order]
        recv2_counts = np.bincount(sender[order], minlength=size).astype(np.int64)
        idx3 = locate(recv2_ids, asked)
        # -- tell each carrier s(A, B) which rows of A it sends B
        staged, send2_counts = _alltoallv_ids(comm, recv2_ids, recv2_counts)
        # -- as an owner's neighbour: ask each owner of my node for the rows I stage and the
        #    rows I need myself, once each; sorted ids are grouped by owner, owners by rank
        request = np.union1d(staged, ghost_ids[direct])
        owner_local = np.searchsorted(mine, np.searchsorted(offsets, request, side="right") - 1)
        requested, send1_counts = _alltoallv_ids(
            local, request, np.bincount(owner_local, minlength=L).astype(np.int64))
        lo = offsets[me]
        agree(comm, None if not requested.size or (requested.min() >= lo and
                                                    requested.max() < offsets[me + 1]) else
              "node plan: a peer requested rows this rank does not own")
        self.pos_direct = np.flatnonzero(direct)
        self.sel_direct = np.searchsorted(request, ghost_ids[direct]).astype(np.int64)
        no = np.zeros(L, dtype=bool)
        self.leg1 = Route(local, requested - lo, send1_counts,
                          np.bincount(owner_local, minlength=L), self.stats, no, legs=1)
        self.leg2 = Route(comm, np.searchsorted(request, staged), send2_counts, recv2_counts,
                          self.stats, ~nodes.same, legs=0)
        self.leg3 = Route(local, idx3, asked_counts, np.bincount(carrier, minlength=L),
                          self.stats, no, legs=0)
        self.send_idx = self.leg1.send_idx    # my rows that leave me (as the flat plan's)
        self.n_send = int(self.send_counts.sum())
        self.comm_local = local
        self.shared = shares_memory(local) if shared is None else bool(shared)
        # no rank sends between nodes (one node): leg 2 posts nothing
        self.leg2_idle = not comm.allreduce(self.leg2.n_send + self.leg2.n_recv)
        if self.shared:
            self.share1, self.share3 = SharedRoute(self.leg1), SharedRoute(self.leg3)
            self.sel_send2 = self.leg2.send_idx
        self.reads_in_place = self.shared and (True if in_place is None else bool(in_place))
        self._rows_windows: dict[tuple, Window] = {}  # (f, dtype, slot): the rows windows
        if self.reads_in_place:
            self._place_rows(owner_local)
        # leg 1's rows (``request``) are my ghosts in order: the partial sums of a reduce
        # can be made where leg 1 backwards reads them (``reduce_partials``)
        self._partials_in_place = (self.pos_direct.size == self.n_ghost
                                   and self.leg1.n_recv == self.n_ghost)

    def _place_rows(self, owner_local: np.ndarray) -> None:
        """The node's rows window of the in-place bcast (``start_bcast_in_place``): rank q's
        segment holds the distinct rows of its block that the node's ranks asked for
        (``published``, in increasing order) and then q's own ghost rows from other nodes
        (in ``pos_far`` order). ``ghost_slots[g]``: where ghost g sits in a half of it."""
        l1, local = self.leg1, self.comm_local
        self.published = np.unique(l1.send_idx)
        # each asker learns where its rows sit among their owner's published rows
        where = np.searchsorted(self.published, l1.send_idx).astype(np.int64)
        got = np.empty(l1.n_recv, dtype=np.int64)
        local.Alltoallv([where, (l1.send_counts, l1.send_displs), MPI.INT64_T],
                        [got, (l1.recv_counts, l1.recv_displs), MPI.INT64_T])
        counts = np.empty((local.Get_size(), 2), dtype=np.int64)
        local.Allgather(np.array([self.published.size, self.pos_far.size], dtype=np.int64),
                        counts)
        self.node_rows = counts.sum(axis=1)
        start = displacements(self.node_rows)
        me = local.Get_rank()
        at = start[owner_local] + got        # each requested row (``request`` order)
        self.ghost_slots = np.empty(self.n_ghost, dtype=np.int64)
        self.ghost_slots[self.pos_direct] = at[self.sel_direct]
        self.ghost_slots[self.pos_far] = start[me] + counts[me, 0] + np.arange(self.pos_far.size)
        self.slots_send2 = at[self.leg2.send_idx]
        self.rows_total = int(self.node_rows.sum())
        # rows read out of other ranks' segments per call: leg 1's, as through ``share1``
        self._read_others = int(l1.n_recv - l1.recv_counts[me])

    def _free_windows(self) -> None:
        """Collective over the node: free every shared window (each is made again at its
        next use, in the same order on every rank)."""
        if self.shared:
            self.share1.close()
            self.share3.close()
        for window in self._rows_windows.values():
            window.close()
        self._rows_windows.clear()

    def close(self) -> None:
        """Collective over the node: free the shared windows (the plan then sends)."""
        self._free_windows()
        self.shared = self.reads_in_place = False

    def release_buffers(self) -> None:
        """``Route.release_buffers`` for the three legs, and the shared windows freed
        (collective over the node, as every rank calls it at the same point; the next calls
        make what they use again, in the same order on every rank)."""
        for leg in (self.leg1, self.leg2, self.leg3):
            leg.release_buffers()
        self._free_windows()

    # ------------------------------------------------------------ what callers read
    def buffer(self, name: str, rows: int, f: int, dtype, slot: int = 0) -> np.ndarray:
        """A reusable (rows x f) buffer of the plan's pool."""
        return self.leg2.buffer(name, rows, f, dtype, slot)

    def send_volume(self) -> int:
        """Rows the flat plan would send per bcast (the node plan's legs: ``volumes``)."""
        return self.n_send

    def recv_volume(self) -> int:
        return self.n_ghost

    def volumes(self) -> list[tuple[str, int, int, int]]:
        """``(tier, messages, rows sent, rows received)`` of each leg of a bcast on this
        rank, others only (the reduce moves the same rows backwards)."""
        me_local, me = self.comm_local.Get_rank(), self.comm.Get_rank()
        out = []
        for tier, leg, mine in (("intra", self.leg1, me_local), ("inter", self.leg2, me),
                                ("intra", self.leg3, me_local)):
            sent, received, _, _ = leg.rows[True]
            out.append((tier, peers(leg.send_counts, leg.recv_counts, mine), sent, received))
        return out

    # ------------------------------------------------------------ the codec of leg 2
    def _coded(self, codec: Codec | None, dtype) -> bool:
        return not HaloPlan.passthrough(codec, dtype)

    def _encode(self, codec: Codec, x: np.ndarray, idx: np.ndarray, rows: int, name: str,
                key: int, slot: int) -> np.ndarray:
        buf = self.buffer(name, rows, codec.row_bytes(x.shape[1]), np.uint8, slot)
        return encode_rows(codec, x, idx, buf, self.stats, self.comm,
                           mix64(self._key_base, key))

    def _post2(self, send: np.ndarray, recv: np.ndarray, forward: bool) -> MPI.Request:
        """Leg 2 uncoded (nothing to post when no rank of ``comm`` has rows for it)."""
        return MPI.REQUEST_NULL if self.leg2_idle else self.leg2.post(send, recv, forward)

    def _blocking(self, leg: Route, send: np.ndarray, recv: np.ndarray, forward: bool) -> None:
        request = leg.post(send, recv, forward)
        with self.stats.timing("seconds_exchange"):
            request.Wait()

    # ------------------------------------------------------------ bcast
    def start_bcast(self, x_local: np.ndarray, ghost: np.ndarray, key: int = 0,
                    slot: int = 0) -> NodeExchange:
        """Begin ghost[:] = the rows of X named by my ghost columns: leg 1 (blocking), then
        leg 2 posted; ``finish()`` lands them (leg 3)."""
        self.stats.node_exchanges += 1
        recv1, idx2 = self._leg1(x_local, ghost, slot)
        request, recv2, codec = self._start_leg2(recv1, idx2, key, slot)
        return NodeExchange(self, request, recv2, codec, ghost, True, (recv1, slot))

    def _start_leg2(self, rows: np.ndarray, idx: np.ndarray, key: int, slot: int):
        """Post leg 2 of a bcast with ``rows[idx]`` (encoded under a codec): (request, its
        receive buffer, the codec or None)."""
        f, dtype, codec, l2 = rows.shape[1], rows.dtype, self.codec, self.leg2
        if not self._coded(codec, dtype):
            send2 = self.buffer("send2", l2.n_send, f, dtype, slot)
            recv2 = self.buffer("recv2", l2.n_recv, f, dtype, slot)
            with self.stats.timing("seconds_exchange"):
                kernels.gather_rows(rows, idx, send2)
            return self._post2(send2, recv2, True), recv2, None
        send2 = self._encode(codec, rows, idx, l2.n_send, "enc_send2", key, slot)
        recv2 = self.buffer("enc_recv2", l2.n_recv, send2.shape[1], np.uint8, slot)
        return l2.post(send2, recv2, True, param_bytes=codec.param_bytes), recv2, codec

    def _decoded2(self, recv2: np.ndarray, codec: Codec | None, f: int, dtype,
                  slot: int) -> np.ndarray:
        """Leg 2's rows as they arrived, decoded when a codec encoded them."""
        if codec is None:
            return recv2
        rows2 = self.buffer("recv2", self.leg2.n_recv, f, dtype, slot)
        with self.stats.timing("seconds_codec"):
            codec.decode(recv2, rows2, NO_INDEX, accumulate=False)
        return rows2

    def _rows_window(self, f: int, dtype, slot: int) -> Window:
        key = (f, np.dtype(dtype).str, slot)
        window = self._rows_windows.get(key)
        if window is None:  # collective: every rank of the node makes its first call here
            window = self._rows_windows[key] = Window(self.comm_local, self.node_rows, f, dtype)
        return window

    def start_bcast_in_place(self, x_local: np.ndarray, key: int = 0,
                             slot: int = 0) -> NodeExchange:
        """Begin a bcast whose ghost rows are read where they lie (``reads_in_place``): my
        published rows are stored in my segment of the node's rows window (one copy; no
        reader copies them again), leg 2 is posted from the window; ``finish()`` places my
        rows from other nodes in my segment and returns the window's half of this call,
        whose row ``ghost_slots[g]`` is ghost g, valid until the call on ``slot`` after
        the next (each half serves every other call; the barrier of call k + 1 follows
        every rank's reads of call k)."""
        f, stats = x_local.shape[1], self.stats
        stats.node_exchanges += 1
        window = self._rows_window(f, x_local.dtype, slot)
        half = window.calls % 2
        window.calls += 1
        rows, mine = window.half(half), window.segment(half)
        n_pub = self.published.size
        if self.rows_total:
            with stats.timing("seconds_exchange"):
                if n_pub:
                    kernels.gather_rows(x_local, self.published, mine[:n_pub])
                window.sync()
        stats.count_exchange(0, 0, legs=self.leg1.legs)
        stats.bytes_shared_read += self._read_others * f * x_local.itemsize
        request, recv2, codec = self._start_leg2(rows, self.slots_send2, key, slot)
        return NodeExchange(self, request, recv2, codec, rows, True, (mine[n_pub:], slot), True)

    def land_in_place(self, recv2: np.ndarray, codec: Codec | None, far: np.ndarray,
                      slot: int, keep: bool) -> None:
        """Leg 3 of an in-place bcast: decode, distribute inside the node, and (``keep``)
        store my rows from other nodes in ``far``, my segment's tail."""
        recv2 = self._decoded2(recv2, codec, far.shape[1], far.dtype, slot)
        rows, index = self.share3.exchange(recv2, self.leg3.send_idx, True, slot)
        if keep and far.shape[0]:
            with self.stats.timing("seconds_exchange"):
                kernels.gather_rows(rows, index, far)

    def _leg1(self, x_local: np.ndarray, ghost: np.ndarray, slot: int):
        """Leg 1 of a bcast: (rows, index) with ``rows[index]`` leg 2's send rows; through
        the window, the direct ghost rows are placed now (the message path: at landing)."""
        l1 = self.leg1
        if self.shared:
            rows, index = self.share1.exchange(x_local, l1.send_idx, True, slot)
            with self.stats.timing("seconds_exchange"):
                kernels.move_rows(rows, index[self.sel_direct], ghost, self.pos_direct)
            return rows, index[self.sel_send2]
        f, dtype = x_local.shape[1], x_local.dtype
        send1 = self.buffer("send1", l1.n_send, f, dtype, slot)
        recv1 = self.buffer("recv1", l1.n_recv, f, dtype, slot)
        with self.stats.timing("seconds_exchange"):
            kernels.gather_rows(x_local, l1.send_idx, send1)
        self._blocking(l1, send1, recv1, True)
        return recv1, self.leg2.send_idx

    def land_bcast(self, recv2: np.ndarray, codec: Codec | None, recv1: np.ndarray,
                   slot: int, ghost: np.ndarray | None) -> None:
        """Leg 3 of a bcast whose leg 2 arrived: decode, distribute inside the node, place
        (``ghost`` None: take part in leg 3 and discard)."""
        f, dtype = recv1.shape[1], recv1.dtype
        l3 = self.leg3
        recv2 = self._decoded2(recv2, codec, f, dtype, slot)
        if self.shared:
            rows, index = self.share3.exchange(recv2, l3.send_idx, True, slot)
            if ghost is not None:
                with self.stats.timing("seconds_exchange"):
                    kernels.move_rows(rows, index, ghost, self.pos_far)
            return
        send3 = self.buffer("send3", l3.n_send, f, dtype, slot)
        recv3 = self.buffer("recv3", l3.n_recv, f, dtype, slot)
        with self.stats.timing("seconds_exchange"):
            kernels.gather_rows(recv2, l3.send_idx, send3)
        self._blocking(l3, send3, recv3, True)
        if ghost is not None:
            with self.stats.timing("seconds_exchange"):
                ghost[self.pos_direct] = recv1[self.sel_direct]
                ghost[self.pos_far] = recv3

    # ------------------------------------------------------------ reduce
    def start_reduce(self, ghost_partial: np.ndarray, out_local: np.ndarray | None = None,
                     key: int = 0, slot: int = 0) -> NodeExchange:
        """Begin adding my partial sums for ghost rows into their owners' rows: leg 3
        backwards (blocking; the node's partial rows summed at its carriers), then leg 2
        posted; ``finish()`` runs leg 1 backwards and adds into ``out_local`` (or ``into``).
        ``ghost_partial`` must stay untouched until then."""
        f, dtype, codec = ghost_partial.shape[1], ghost_partial.dtype, self.codec_backward
        l2, l3 = self.leg2, self.leg3
        self.stats.node_exchanges += 1
        got3 = self.buffer("recv3r", l3.n_send, f, dtype, slot)
        if self.shared:
            rows, index = self.share3.exchange(ghost_partial, self.pos_far, False, slot)
            with self.stats.timing("seconds_exchange"):
                kernels.gather_rows(rows, index, got3)
        else:
            back3 = self.buffer("send3r", l3.n_recv, f, dtype, slot)
            with self.stats.timing("seconds_exchange"):
                kernels.gather_rows(ghost_partial, self.pos_far, back3)
            self._blocking(l3, back3, got3, False)
        acc2 = self.buffer("acc2", l2.n_recv, f, dtype, slot)
        with self.stats.timing("seconds_exchange"):
            acc2[...] = 0
            l3.scatter_add(got3, acc2)
        if not self._coded(codec, dtype):
            got2 = self.buffer("recv2r", l2.n_send, f, dtype, slot)
            request = self._post2(acc2, got2, False)
            return NodeExchange(self, request, got2, None, out_local, False,
                                (ghost_partial, slot))
        enc = self._encode(codec, acc2, NO_INDEX, l2.n_recv, "enc_send2r", key, slot)
        got2 = self.buffer("enc_recv2r", l2.n_send, enc.shape[1], np.uint8, slot)
        request = l2.post(enc, got2, False, param_bytes=codec.param_bytes)
        return NodeExchange(self, request, got2, codec, out_local, False, (ghost_partial, slot))

    def reduce_partials(self, f: int, dtype, slot: int = 0) -> np.ndarray | None:
        """Where a reduce's partial sums (ghost order) can be computed in place, or None:
        my segment of the window leg 1 backwards reads, when its rows are my ghosts in
        order (all on my node, so none is staged only). Collective over the node on its
        first call at each width, dtype and slot (it may make the window)."""
        if not self.shared:
            return None
        segment = self.share1.segment(False, f, dtype, slot)
        return segment if self._partials_in_place else None

    def land_reduce(self, got2: np.ndarray, codec: Codec | None, partial: np.ndarray,
                    slot: int, out: np.ndarray | None) -> None:
        """Leg 1 backwards of a reduce whose leg 2 arrived (``out`` None: take part and
        discard)."""
        f, dtype = partial.shape[1], partial.dtype
        l1, l2 = self.leg1, self.leg2
        # through the window the sums are made in my segment of it (no copy to publish)
        acc1 = (self.share1.segment(False, f, dtype, slot) if self.shared else
                self.buffer("acc1", l1.n_recv, f, dtype, slot))
        with self.stats.timing("seconds_exchange"):
            if not (self.shared and _same_start(acc1, partial)):  # (not made in place)
                acc1[...] = 0
                acc1[self.sel_direct] = partial[self.pos_direct]
            if codec is None:
                l2.scatter_add(got2, acc1)
        if codec is not None:
            with self.stats.timing("seconds_codec"):
                codec.decode(got2, acc1, l2.send_idx, accumulate=True)
        if self.shared:  # the owners add the sums where they lie (no gathered copy)
            rows, index = self.share1.exchange(None, None, False, slot, f, dtype)
            if out is not None:
                with self.stats.timing("seconds_exchange"):
                    kernels.scatter_add(rows, l1.send_idx, out, kernels.column_split(f),
                                        sel=index)
            return
        got1 = self.buffer("recv1r", l1.n_send, f, dtype, slot)
        self._blocking(l1, acc1, got1, False)
        if out is not None:
            with self.stats.timing("seconds_exchange"):
                l1.scatter_add(got1, out)

    def bcast(self, x_local: np.ndarray, ghost: np.ndarray, key: int = 0) -> None:
        self.start_bcast(x_local, ghost, key).finish()

    def reduce(self, ghost_partial: np.ndarray, out_local: np.ndarray, key: int = 0) -> None:
        self.start_reduce(ghost_partial, out_local, key).finish()


class NodeExchange:
    """A node-aware exchange in flight (its inter-node leg); ``finish(into=None)`` and
    ``wait()`` as ``halo.Exchange``'s (``wait`` still takes part in the last intra-node
    leg, which the node's other ranks wait for)."""

    def __init__(self, plan: NodePlan, request: MPI.Request, recv: np.ndarray,
                 codec: Codec | None, destination: np.ndarray | None, forward: bool,
                 kept: tuple[np.ndarray, int], in_place: bool = False):
        self.plan, self.request, self.recv, self.codec = plan, request, recv, codec
        self.destination, self.forward, self.kept = destination, forward, kept
        self.in_place = in_place
        self.posted = time.perf_counter()
        self.done = False

    def wait(self) -> None:
        """Complete the exchange and discard what arrived."""
        self.request.Wait()
        self._land(None)

    def _land(self, dst: np.ndarray | None) -> None:
        self.done = True
        rows, slot = self.kept
        if self.in_place:
            self.plan.land_in_place(self.recv, self.codec, rows, slot, dst is not None)
        elif self.forward:
            self.plan.land_bcast(self.recv, self.codec, rows, slot, dst)
        else:
            self.plan.land_reduce(self.recv, self.codec, rows, slot, dst)

    def finish(self, into: np.ndarray | None = None) -> np.ndarray:
        dst = self.destination if into is None else into
        if dst is None:
            self.wait()
            raise ValueError("finish: a reduce started without out_local needs into=")
        stats = self.plan.stats
        stats.seconds_exchange_hidden += time.perf_counter() - self.posted
        with stats.timing("seconds_exchange"):
            self.request.Wait()
        self._land(dst)
        return dst
