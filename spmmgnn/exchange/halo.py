"""The halo plan: who needs which of my rows, built once from the ghost column ids.

Like PETSc's star forest it has two directions over the same index lists:

* ``bcast``: owners' rows -> ghost copies (fetch the rows of X named by my ghost columns);
* ``reduce``: partial sums computed for ghost rows -> added into the owners' rows (the
  transpose, used for ``A^T Y`` without storing A^T).

Each direction has begin/end verbs, like ``PetscSFBcastBegin/End``: ``start_bcast(x, ghost)``
and ``start_reduce(partial, out)`` name the source and the destination, pack (and encode)
the rows and post one non-blocking ``Ialltoallv``; the returned ``Exchange`` is finished
later with the same ``finish()`` for both directions, so the caller multiplies its diagonal
block while the rows travel. The statistics and the codecs are bound when the plan is built.
Counts and displacements are fixed at plan time; rows travel as a contiguous MPI type so
counts never depend on the feature width, and buffers are reused across calls (one set per
``slot``, so several exchanges may be in flight at once). Every byte is counted, split by
tier (the peer on my node or on another: ``nodes``).

Underneath, a ``Route`` is one ``Alltoallv`` of indexed rows (per peer, which rows of a source
buffer to send; per peer, how many land in a destination buffer), forward and backward; the
halo plan is one route, the node-aware plan (``node_exchange.NodePlan``) three.
"""

from __future__ import annotations

import time

import numpy as np
from mpi4py import MPI

from ..backend.host import HOST
from ..backend.protocol import Backend
from ..local.codecs import CastCodec, Codec
from ..local.hashing import mix64
from ..runtime.errors import agree
from ..runtime.stats import CommStats, exchange_deltas
from .nodes import NodeMap
from .persistent import Owned, available, start
from .transport import displacements, mpi_link

NO_INDEX = np.zeros(0, dtype=np.int64)


class Exchange:
    """One row exchange in flight, returned by ``HaloPlan.start_bcast`` / ``start_reduce``.

    ``finish(into=None)`` waits for it and lands the rows in ``into`` (by default the
    destination named when it started) and returns that array: a bcast overwrites the ghost
    rows with the owners' rows (decoded when a codec is used), a reduce adds the partial sums
    peers computed for my rows. ``wait()`` completes it and discards what arrived.
    """

    __slots__ = ("codec", "destination", "done", "forward", "plan", "posted", "recv",
                 "request")

    def __init__(self, plan: HaloPlan, request, recv, codec: Codec | None, destination,
                 forward: bool):
        self.plan, self.request, self.recv, self.codec = plan, request, recv, codec
        self.destination, self.forward = destination, forward
        self.posted = time.perf_counter()
        self.done = False

    def wait(self) -> None:
        """Complete the exchange and discard what arrived (draining one no longer needed)."""
        self.request.Wait()
        self.done = True

    def finish(self, into=None):
        dst = self.destination if into is None else into
        if dst is None:
            self.wait()  # leave nothing in flight
            raise ValueError("finish: a reduce started without out_local needs into=")
        plan, codec, stats = self.plan, self.codec, self.plan.stats
        t0 = time.perf_counter()  # (two clock reads instead of a timing block each)
        stats.seconds_exchange_hidden += t0 - self.posted
        self.request.Wait()
        stats.seconds_exchange += time.perf_counter() - t0
        self.done = True
        if self.forward:
            if codec is not None:
                with stats.timing("seconds_codec"):
                    plan.backend.decode(codec, self.recv, dst, NO_INDEX, accumulate=False)
            elif dst is not self.recv:
                with stats.timing("seconds_exchange"):
                    dst[...] = self.recv
        elif codec is None:
            with stats.timing("seconds_exchange"):
                plan.scatter_add(self.recv, dst)
        else:
            with stats.timing("seconds_codec"):
                plan.backend.decode(codec, self.recv, dst, plan.send_idx, accumulate=True)
        return dst


def check_ghosts(comm: MPI.Comm, owner_offsets, ghost_ids):
    """Collective: ``(owner_offsets, ghost_ids, rows needed from each rank)`` as int64 after
    the checks every halo plan makes (one error on every rank if any rank fails one)."""
    size, me = comm.Get_size(), comm.Get_rank()
    owner_offsets = np.asarray(owner_offsets, dtype=np.int64)
    ghost_ids = np.asarray(ghost_ids, dtype=np.int64)
    error = None
    if owner_offsets.size != size + 1:
        error = "halo plan: one row range per rank of the communicator expected"
    elif ghost_ids.size and np.any(np.diff(ghost_ids) <= 0):
        error = "halo plan: ghost ids must be sorted and unique"
    elif ghost_ids.size and (ghost_ids[0] < 0 or ghost_ids[-1] >= owner_offsets[-1]):
        error = "halo plan: a ghost id lies outside the global row range"
    agree(comm, error)
    counts = np.diff(np.searchsorted(ghost_ids, owner_offsets)).astype(np.int64)
    agree(comm, None if counts[me] == 0 else
          "halo plan: a rank cannot list its own rows as ghosts")
    return owner_offsets, ghost_ids, counts


def encode_rows(codec: Codec, x, idx: np.ndarray, buf, stats: CommStats, comm: MPI.Comm,
                key: int, backend: Backend = HOST):
    """Collective over ``comm``: encode ``x[idx]`` into ``buf`` (timed as codec work); NaN or
    Inf on any rank is one error on every rank."""
    with stats.timing("seconds_codec"):
        bad = backend.encode(codec, x, idx, buf, key)
    agree(comm, f"{bad} row(s) with NaN or Inf reached the {codec.name} codec" if bad else None)
    return buf


class Route:
    """Rows moved over one communicator by one ``Alltoallv``: per-peer lists of rows to send
    out of a source buffer (``send_idx``, grouped by peer, ``send_counts``) and per-peer
    counts of rows that land in a destination buffer (``recv_counts``, in peer order), like
    one level of PETSc's star forest.

    *forward*: ``dst = alltoallv(src[send_idx])``; *backward* (the transpose): rows shaped
    like ``dst`` travel back and are added into ``src[send_idx]`` (``scatter_add``). A peer
    may be the rank itself (a local copy, never counted). ``inter`` (per peer: on another
    node; None: all of them) splits the counted bytes by tier; ``legs`` is what one post
    adds to the statistics' exchange count. Collective only where a subclass communicates to
    build it.

    The rows are ``backend``'s arrays (numpy on the host backend, torch tensors on the torch
    backend) and travel by ``link`` (the grid's transport for ``comm``; by default MPI).
    """

    def __init__(self, comm: MPI.Comm, send_idx: np.ndarray, send_counts: np.ndarray,
                 recv_counts: np.ndarray, stats: CommStats | None,
                 inter: np.ndarray | None = None, legs: int = 1, backend: Backend = HOST,
                 link=None):
        self.comm = comm
        self.backend = backend
        self.link = mpi_link(comm, backend) if link is None else link
        self._name = f"route{id(self)}"  # its staged buffers' name (a torch backend on MPI)
        self.stats = CommStats() if stats is None else stats
        self.send_idx = np.asarray(send_idx, dtype=np.int64)
        self.send_counts = np.asarray(send_counts, dtype=np.int64)
        self.recv_counts = np.asarray(recv_counts, dtype=np.int64)
        self.send_displs = displacements(self.send_counts)
        self.recv_displs = displacements(self.recv_counts)
        self.n_send = int(self.send_counts.sum())
        self.n_recv = int(self.recv_counts.sum())
        self.legs = legs
        me = comm.Get_rank()
        other = np.ones(comm.Get_size(), dtype=bool)
        other[me] = False
        inter = other if inter is None else other & np.asarray(inter, dtype=bool)
        # rows to / from other ranks, and of them to / from other nodes, per direction
        self.rows = {True: (int(self.send_counts[other].sum()), int(self.recv_counts[other].sum()),
                            int(self.send_counts[inter].sum()), int(self.recv_counts[inter].sum()))}
        sent, received, inter_sent, inter_received = self.rows[True]
        self.rows[False] = (received, sent, inter_received, inter_sent)
        self.buffers = backend.pool()
        # per (direction, send buffer, recv buffer, parameter bytes) of the pool's own
        # buffers: (send, recv, persistent request, the statistics' increments)
        self._posts: dict[tuple, tuple] = {}
        # MPI's persistent requests hold the buffers themselves: numpy arrays over MPI
        self._persistent = Owned(self) if available() and getattr(self.link, "plain",
                                                                 False) else None

    def release_buffers(self) -> None:
        """Free the pooled work arrays and the persistent exchanges made on them (local:
        freeing a request is). Every rank must call it at the same point of its sequence:
        the next posts then make their requests again, collectively, in the same order on
        every rank, as the first posts did. For widths and dtypes that will not run again
        (the float64 symmetry probe's): ghost rows, send rows, partial sums."""
        if self._persistent is not None:
            self._persistent.free()
        self._posts.clear()
        self.buffers = self.backend.pool()

    def buffer(self, name: str, rows: int, f: int, dtype, slot: int = 0):
        """A reusable (rows x f) buffer of the plan's pool."""
        return self.buffers.get(name, (rows, f), dtype, slot)

    def scatter_add(self, rows, out_local) -> None:
        """out_local[send_idx[i]] += rows[i] (what peers sent back for the rows I sent)."""
        self.backend.scatter_add(rows, self.send_idx, out_local)

    def post(self, send, recv, forward: bool, param_bytes: int = 0):
        """Post one Ialltoallv of whole rows of ``send`` into ``recv`` and count its bytes.

        forward: send_counts out / recv_counts in; otherwise the reverse. Between two
        buffers of the route's own pool (``buffer``) the exchange is made persistent on
        its first post (``persistent``: every rank posts the same pooled buffers at the
        same call) and each later post is a ``Start``."""
        stats = self.stats
        made = self._posts.get((forward, id(send), id(recv), param_bytes))
        if made is None:
            made = self._prepare(send, recv, forward, param_bytes)
        request, deltas = made[2], made[3]
        t0 = time.perf_counter()
        if request is None:  # (buffers the route does not own: no request to keep)
            request = self.link.ialltoallv(send, made[0][0], recv, made[0][2], stats,
                                           self._name, made[0][1], made[0][3])
        else:
            start(request)
        stats.seconds_exchange += time.perf_counter() - t0
        stats.add_exchange(deltas)
        return request

    def _prepare(self, send, recv, forward: bool, param_bytes: int) -> tuple:
        """``(counts and displacements, recv, persistent request or None, statistics'
        increments)`` of a post; kept (and the request made, collectively) when both buffers
        are the pool's and the link is MPI's on numpy arrays."""
        row_bytes = int(send.shape[1]) * self.backend.dtype(send).itemsize
        sc, sd, rc, rd = ((self.send_counts, self.send_displs, self.recv_counts, self.recv_displs)
                          if forward else
                          (self.recv_counts, self.recv_displs, self.send_counts, self.send_displs))
        counts = (sc, sd, rc, rd)
        sent, received, inter_sent, inter_received = self.rows[forward]
        deltas = exchange_deltas(sent * row_bytes, received * row_bytes, sent * param_bytes,
                                 inter_sent * row_bytes, inter_received * row_bytes,
                                 legs=self.legs)
        if self._persistent is None or not (self.buffers.owns(send)
                                            and self.buffers.owns(recv)):
            return counts, recv, None, deltas
        specs = self.link.row_specs(send, sc, recv, rc, sd, rd)
        made = (send, recv, self._persistent.alltoallv(self.comm, *specs), deltas)
        self._posts[(forward, id(send), id(recv), param_bytes)] = made
        return made


class HaloPlan(Route):
    """Index lists, counts and displacements for exchanging ghost rows on ``comm``.

    ``owner_offsets[q]:owner_offsets[q+1]`` is the range of global rows held by rank q of
    ``comm``; ``ghost_ids`` are the sorted global rows this rank needs from others (never its
    own). Collective over ``comm``; every check is agreed, so a bad plan on one rank is an
    error on all of them.

    What stays fixed for the plan's life is bound here: the ``stats`` every exchange counts
    into (the operator's), the ``codec`` of the bcast and ``codec_backward`` of the reduce
    (None: rows travel as they are), ``seed``/``stream`` of their stochastic rounding, and
    ``nodes`` (a ``NodeMap`` of ``comm``; None: by shared memory), which splits the bytes
    into the intra- and the inter-node tier. This is the *flat* exchange: every rank sends
    every peer the rows it needs, whatever node the peer is on (``node_exchange`` has the
    node-aware one).
    """

    exchange = "flat"

    def __init__(self, comm: MPI.Comm, owner_offsets: np.ndarray, ghost_ids: np.ndarray,
                 stats: CommStats | None = None, codec: Codec | None = None,
                 codec_backward: Codec | None = None, seed: int = 0,
                 stream: int | None = None, nodes=None, backend: Backend = HOST, link=None):
        self.codec, self.codec_backward = codec, codec_backward
        size, me = comm.Get_size(), comm.Get_rank()
        self._key_base = mix64(seed, me if stream is None else stream)
        owner_offsets, ghost_ids, recv_counts = check_ghosts(comm, owner_offsets, ghost_ids)
        send_counts = np.empty(size, dtype=np.int64)
        comm.Alltoall(recv_counts, send_counts)
        requested = np.empty(int(send_counts.sum()), dtype=np.int64)
        comm.Alltoallv([ghost_ids, (recv_counts, displacements(recv_counts)), MPI.INT64_T],
                       [requested, (send_counts, displacements(send_counts)), MPI.INT64_T])
        lo, hi = owner_offsets[me], owner_offsets[me + 1]
        agree(comm, None if not requested.size or (requested.min() >= lo
                                                   and requested.max() < hi) else
              "halo plan: a peer requested rows this rank does not own")
        nodes = NodeMap.shared(comm) if nodes is None else nodes
        super().__init__(comm, requested - lo, send_counts, recv_counts, stats, ~nodes.same,
                         backend=backend, link=link)
        self.nodes = nodes
        self.n_ghost = self.n_recv
        self.ghost_ids = ghost_ids

    def send_volume(self) -> int:
        """Rows this rank sends per bcast (= rows it receives per reduce)."""
        return self.n_send

    def recv_volume(self) -> int:
        return self.n_ghost

    def _post(self, send, recv, forward: bool, param_bytes: int = 0):
        return self.post(send, recv, forward, param_bytes)

    @staticmethod
    def passthrough(codec: Codec | None, dtype) -> bool:
        """True when rows can travel as they are (no codec, or a cast to their own type)."""
        return codec is None or (isinstance(codec, CastCodec) and codec.wire == np.dtype(dtype))

    def codec_key(self, key: int) -> int:
        """The stochastic-rounding key this plan's codecs use for call key ``key`` (the
        device path's ``device_quantize`` rounds with it: the same bits)."""
        return mix64(self._key_base, key)

    def _encode(self, codec: Codec, x, idx: np.ndarray, rows: int, name: str, key: int,
                slot: int):
        """Encode rows into a reusable byte buffer; NaN/Inf anywhere is a collective error.

        ``key`` selects the stochastic-rounding stream: the same key gives the same bits."""
        buf = self.buffer(name, rows, codec.row_bytes(x.shape[1]), np.uint8, slot)
        return encode_rows(codec, x, idx, buf, self.stats, self.comm,
                           mix64(self._key_base, key), self.backend)

    def start_bcast(self, x_local, ghost, key: int = 0, slot: int = 0) -> Exchange:
        """Begin ghost[:] = the rows of X named by this rank's ghost columns; ``finish()``
        the returned exchange before reading ``ghost``. ``key`` selects the codec's
        stochastic rounding for this call; ``slot`` keeps exchanges in flight at the same
        time in separate buffers."""
        f, codec = x_local.shape[1], self.codec
        dtype = self.backend.dtype(x_local)
        if codec is None or self.passthrough(codec, dtype):
            send = self.buffer("send", self.n_send, f, dtype, slot)
            t0 = time.perf_counter()  # (two clock reads instead of a timing block)
            self.backend.gather_rows(x_local, self.send_idx, send)
            self.stats.seconds_exchange += time.perf_counter() - t0
            return Exchange(self, self._post(send, ghost, True), ghost, None, ghost, True)
        send = self._encode(codec, x_local, self.send_idx, self.n_send, "enc_send", key, slot)
        recv = self.buffer("enc_recv", self.n_ghost, send.shape[1], np.uint8, slot)
        request = self._post(send, recv, True, param_bytes=codec.param_bytes)
        return Exchange(self, request, recv, codec, ghost, True)

    def start_reduce(self, ghost_partial, out_local=None, key: int = 0,
                     slot: int = 0) -> Exchange:
        """Begin sending partial sums for ghost rows to their owners; ``finish()`` adds the
        partial sums peers computed for my rows into ``out_local`` (or into the array given
        to ``finish``), which may be written until then. ``ghost_partial`` must stay
        untouched until the exchange is finished."""
        f, codec = ghost_partial.shape[1], self.codec_backward
        dtype = self.backend.dtype(ghost_partial)
        if self.passthrough(codec, dtype):
            recv = self.buffer("partial_recv", self.n_send, f, dtype, slot)
            return Exchange(self, self._post(ghost_partial, recv, False), recv, None, out_local,
                            False)
        send = self._encode(codec, ghost_partial, NO_INDEX, self.n_ghost, "enc_partial", key,
                            slot)
        recv = self.buffer("enc_partial_recv", self.n_send, send.shape[1], np.uint8, slot)
        request = self._post(send, recv, False, param_bytes=codec.param_bytes)
        return Exchange(self, request, recv, codec, out_local, False)

    def bcast(self, x_local, ghost, key: int = 0) -> None:
        """Blocking ``start_bcast`` + ``finish``."""
        self.start_bcast(x_local, ghost, key).finish()

    def reduce(self, ghost_partial, out_local, key: int = 0) -> None:
        """Blocking ``start_reduce`` + ``finish``: out_local[rows peers computed for me] +=
        their partial sums for my rows."""
        self.start_reduce(ghost_partial, out_local, key).finish()
