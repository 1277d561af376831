"""The halo plan: who needs which of my rows, built once from the ghost column ids.

Like PETSc's star forest it has two directions over the same index lists:

* ``bcast``: owners' rows -> ghost copies (fetch the rows of X named by my ghost columns);
* ``reduce``: partial sums computed for ghost rows -> added into the owners' rows (the
  transpose, used for ``A^T Y`` without storing A^T).

Each call is one ``Alltoallv`` whose counts and displacements are fixed at plan time; rows
travel as a contiguous MPI type so counts never depend on the feature width, and the buffers
are reused across calls. Every byte that leaves or enters the rank is counted.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from . import kernels
from .codecs import CastCodec, Codec, mix64
from .errors import SpmmgnnError, agree
from .stats import CommStats

NO_INDEX = np.zeros(0, dtype=np.int64)


def _displs(counts: np.ndarray) -> np.ndarray:
    d = np.zeros_like(counts)
    np.cumsum(counts[:-1], out=d[1:])
    return d


class HaloPlan:
    """Index lists, counts and displacements for exchanging ghost rows on ``comm``.

    ``owner_offsets[q]:owner_offsets[q+1]`` is the range of global rows held by rank q of
    ``comm``; ``ghost_ids`` are the sorted global rows this rank needs from others (never its
    own). Collective over ``comm``.
    """

    def __init__(self, comm: MPI.Comm, owner_offsets: np.ndarray, ghost_ids: np.ndarray,
                 seed: int = 0, stream: int | None = None):
        self.comm = comm
        self._key_base = mix64(seed, comm.Get_rank() if stream is None else stream)
        self._calls = 0
        size, me = comm.Get_size(), comm.Get_rank()
        owner_offsets = np.asarray(owner_offsets, dtype=np.int64)
        ghost_ids = np.asarray(ghost_ids, dtype=np.int64)
        if owner_offsets.size != size + 1:
            raise SpmmgnnError("halo plan: one row range per rank of the communicator expected")
        if ghost_ids.size and np.any(np.diff(ghost_ids) <= 0):
            raise SpmmgnnError("halo plan: ghost ids must be sorted and unique")
        self.recv_counts = np.diff(np.searchsorted(ghost_ids, owner_offsets)).astype(np.int64)
        if self.recv_counts[me] != 0:
            raise SpmmgnnError("halo plan: a rank cannot list its own rows as ghosts")
        self.send_counts = np.empty(size, dtype=np.int64)
        comm.Alltoall(self.recv_counts, self.send_counts)
        self.recv_displs = _displs(self.recv_counts)
        self.send_displs = _displs(self.send_counts)
        requested = np.empty(int(self.send_counts.sum()), dtype=np.int64)
        comm.Alltoallv([ghost_ids, (self.recv_counts, self.recv_displs), MPI.INT64_T],
                       [requested, (self.send_counts, self.send_displs), MPI.INT64_T])
        lo, hi = owner_offsets[me], owner_offsets[me + 1]
        if requested.size and (requested.min() < lo or requested.max() >= hi):
            raise SpmmgnnError("halo plan: a peer requested rows this rank does not own")
        self.send_idx = (requested - lo).astype(np.int64)
        self.n_send = int(self.send_counts.sum())
        self.n_ghost = int(ghost_ids.size)
        self.ghost_ids = ghost_ids
        self._buffers: dict[tuple, np.ndarray] = {}
        self._types: dict[int, MPI.Datatype] = {}

    def send_volume(self) -> int:
        """Rows this rank sends per bcast (= rows it receives per reduce)."""
        return self.n_send

    def recv_volume(self) -> int:
        return self.n_ghost

    def buffer(self, name: str, rows: int, f: int, dtype) -> np.ndarray:
        """A reusable (rows x f) buffer, allocated on first use for this (name, f, dtype)."""
        key = (name, f, np.dtype(dtype))
        buf = self._buffers.get(key)
        if buf is None:
            buf = self._buffers[key] = np.empty((rows, f), dtype=dtype)
        return buf

    def _row_type(self, row_bytes: int) -> MPI.Datatype:
        t = self._types.get(row_bytes)
        if t is None:
            t = self._types[row_bytes] = MPI.BYTE.Create_contiguous(row_bytes).Commit()
        return t

    def alltoallv_rows(self, send: np.ndarray, recv: np.ndarray, forward: bool,
                       stats: CommStats, param_bytes: int = 0) -> None:
        """Move whole rows of ``send`` into ``recv`` (C-contiguous, same row width in bytes).

        forward: send_counts out / recv_counts in (bcast); otherwise the reverse (reduce).
        """
        row_bytes = send.shape[1] * send.itemsize
        rt = self._row_type(int(row_bytes))
        sc, sd, rc, rd = ((self.send_counts, self.send_displs, self.recv_counts, self.recv_displs)
                          if forward else
                          (self.recv_counts, self.recv_displs, self.send_counts, self.send_displs))
        with stats.timing("seconds_exchange"):
            self.comm.Alltoallv([send, (sc, sd), rt], [recv, (rc, rd), rt])
        stats.exchanges += 1
        rows_out = int(sc.sum())
        stats.bytes_sent += rows_out * row_bytes
        stats.bytes_received += int(rc.sum()) * row_bytes
        stats.payload_bytes_sent += rows_out * (row_bytes - param_bytes)
        stats.param_bytes_sent += rows_out * param_bytes

    @staticmethod
    def _passthrough(codec: Codec | None, dtype) -> bool:
        """True when rows can travel as they are (no codec, or a cast to their own type)."""
        return codec is None or (isinstance(codec, CastCodec) and codec.wire == np.dtype(dtype))

    def _encode(self, codec: Codec, x: np.ndarray, idx: np.ndarray, rows: int, name: str,
                stats: CommStats) -> np.ndarray:
        """Encode rows into a reusable byte buffer; NaN/Inf anywhere is a collective error."""
        buf = self.buffer(name, rows, codec.row_bytes(x.shape[1]), np.uint8)
        self._calls += 1
        with stats.timing("seconds_codec"):
            bad = codec.encode(x, idx, buf, mix64(self._key_base, self._calls))
        agree(self.comm, f"{bad} row(s) with NaN or Inf reached the {codec.name} codec"
              if bad else None)
        return buf

    def bcast(self, x_local: np.ndarray, ghost: np.ndarray, stats: CommStats,
              codec: Codec | None = None) -> None:
        """ghost[:] = the rows of X named by this rank's ghost columns (fetched from owners)."""
        f = x_local.shape[1]
        if self._passthrough(codec, x_local.dtype):
            send = self.buffer("send", self.n_send, f, x_local.dtype)
            with stats.timing("seconds_exchange"):
                kernels.gather_rows(x_local, self.send_idx, send)
            self.alltoallv_rows(send, ghost, forward=True, stats=stats)
            return
        send = self._encode(codec, x_local, self.send_idx, self.n_send, "enc_send", stats)
        recv = self.buffer("enc_recv", self.n_ghost, send.shape[1], np.uint8)
        self.alltoallv_rows(send, recv, forward=True, stats=stats,
                            param_bytes=codec.param_bytes)
        with stats.timing("seconds_codec"):
            codec.decode(recv, ghost, NO_INDEX, accumulate=False)

    def reduce(self, ghost_partial: np.ndarray, out_local: np.ndarray, stats: CommStats,
               codec: Codec | None = None) -> None:
        """out_local[rows peers computed for me] += their partial sums for my rows."""
        f = ghost_partial.shape[1]
        if self._passthrough(codec, ghost_partial.dtype):
            recv = self.buffer("send", self.n_send, f, ghost_partial.dtype)
            self.alltoallv_rows(ghost_partial, recv, forward=False, stats=stats)
            with stats.timing("seconds_exchange"):
                kernels.scatter_add(recv, self.send_idx, out_local, kernels.column_split(f))
            return
        send = self._encode(codec, ghost_partial, NO_INDEX, self.n_ghost, "enc_recv", stats)
        recv = self.buffer("enc_send", self.n_send, send.shape[1], np.uint8)
        self.alltoallv_rows(send, recv, forward=False, stats=stats,
                            param_bytes=codec.param_bytes)
        with stats.timing("seconds_codec"):
            codec.decode(recv, out_local, self.send_idx, accumulate=True)
