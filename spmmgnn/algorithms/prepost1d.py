"""Hybrid pre/post-aggregation 1D SpMM (SuperGCN §3.3.1; Algorithm 1 of the MVC paper).

For each ordered pair (receiver p, sender q) the cut non-zeros of p's block row in q's
columns form a bipartite graph between p's rows and q's columns. Its minimum vertex cover
(``vertex_cover.min_vertex_cover``, König) splits them:

* **post-aggregation**: non-zeros whose column is in the cover; q sends those rows of X and
  p multiplies them, as in ``sparse1d``;
* **pre-aggregation**: the others (their row is in the cover); they are moved to q once, at
  construction; q multiplies them with its own rows of X and sends p the partial sums of
  p's rows, which p adds.

Rows sent from q to p per SpMM = the cover size <= the distinct columns ``sparse1d`` sends.
Both kinds travel in one message: q's send buffer is ``S = M_send X_q`` (selection rows for
the post-aggregation, each X row once whatever the number of receivers that need it, then
the moved non-zeros of the pre-aggregation, grouped by receiver) and
p finishes with ``Z_p = A_pp X_p + M_recv R`` where R holds what it received (A's values
at the post rows, identity at the pre rows). The exchange is a halo plan over the send
buffers' rows, so codecs, byte counts, overlap and the node exchange's reads in place
(``ghost.GhostBlock``, with ``M_recv`` as its block) are the same machinery as ``sparse1d``.
``matmul_t`` is the mirror plan: p sends ``M_recv^T Y_p`` (partial sums at the post
columns, its own rows of Y at the pre rows), q finishes with ``A_qq^T Y_q + M_send^T S'``.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from ..exchange.halo import displacements
from ..local.local_matrix import LocalCSR
from ..local.split import split_columns
from ..runtime.wire import allgather_json
from .base import DistSpMM
from .ghost import GhostBlock, resolve_codecs
from .vertex_cover import min_vertex_cover


def _alltoallv(comm: MPI.Comm, send: np.ndarray, counts: np.ndarray, mpitype) -> np.ndarray:
    """Variable all-to-all of a 1-D array grouped by destination; returns what arrived."""
    recv_counts = np.empty_like(counts)
    comm.Alltoall(counts, recv_counts)
    recv = np.empty(int(recv_counts.sum()), dtype=send.dtype)
    comm.Alltoallv([send, (counts, displacements(counts)), mpitype],
                   [recv, (recv_counts, displacements(recv_counts)), mpitype])
    return recv


def _cat(parts: list[np.ndarray], dtype) -> np.ndarray:
    return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype)


def cover_split(rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """Per cut non-zero (``rows`` x ``cols`` of one receiver and one sender, in the
    algorithm's order): True if its column is in the minimum vertex cover of their bipartite
    graph (post-aggregation), False if its row is (pre-aggregation). The volume model calls
    this too, so both see the same cover."""
    ur, ri = np.unique(rows, return_inverse=True)
    uc, ci = np.unique(cols, return_inverse=True)
    B = sp.csr_array((np.ones(rows.size), (ri, ci)), shape=(ur.size, uc.size))
    _, col_cover = min_vertex_cover(B)
    return col_cover[ci]


class PrePost1D(DistSpMM):
    name = "prepost1d"
    takes_codecs = True
    takes_exchange = True

    def __init__(self, grid, partition, block_row, col_partition=None,
                 codec: str | None = None, codec_backward: str | None = "same",
                 codec_seed: int = 0, **options):
        super().__init__(grid, partition, block_row, col_partition, **options)
        comm = grid.across_block_rows
        self.codec, self.codec_backward = resolve_codecs(grid.comm, codec, codec_backward)
        self.diag, ghost, ghost_ids = split_columns(block_row, self.col_lo, self.col_hi)
        self._nnz = self.diag.nnz + ghost.nnz
        self._build(comm, ghost.to_scipy().tocoo(), ghost_ids)
        self.plan = self.halo_plan(comm, self._virtual_offsets, self._ghost_virtual,
                                   self.codec, self.codec_backward, codec_seed, grid.rank)
        # M_recv multiplies the received rows (read in place inside a node sharing memory)
        be = self.backend
        self.own, self.pre = be.block(self.diag), be.block(self.M_send)
        self.received = GhostBlock([be.block(self.M_recv)], self.plan, self.stats,
                                   ("pre_recv", "post_partial"))

    # ------------------------------------------------------------ plan (pattern only)
    def _build(self, comm: MPI.Comm, cut: sp.coo_array, ghost_ids: np.ndarray) -> None:
        k = comm.Get_size()
        rows, gcol, vals = cut.row.astype(np.int64), ghost_ids[cut.col], cut.data
        owner = np.searchsorted(self.col_offsets, gcol, side="right") - 1
        order = np.lexsort((gcol, rows, owner))
        rows, gcol, vals, owner = rows[order], gcol[order], vals[order], owner[order]
        bounds = np.searchsorted(owner, np.arange(k + 1))
        post_cols = []                        # per sender q: the cover's columns
        recv_col, recv_val, recv_row = [], [], []   # entries of M_recv
        moved_row, moved_col, moved_val = [], [], []  # pre non-zeros moved to their sender
        moved_counts = np.zeros(k, dtype=np.int64)
        post_counts = np.zeros(k, dtype=np.int64)
        pre_counts = np.zeros(k, dtype=np.int64)
        position = 0  # next row of my receive buffer
        for q in range(k):  # one bipartite graph per peer (a loop over ranks, not non-zeros)
            lo, hi = bounds[q], bounds[q + 1]
            if lo == hi:
                continue
            r, c, v = rows[lo:hi], gcol[lo:hi], vals[lo:hi]
            post = cover_split(r, c)
            cols_q = np.unique(c[post])               # sorted global ids, sent as X rows
            rows_q = np.unique(r[~post])              # my rows that get partial sums
            post_counts[q], pre_counts[q] = cols_q.size, rows_q.size
            post_cols.append(cols_q)
            recv_row += [r[post], rows_q]
            recv_col += [position + np.searchsorted(cols_q, c[post]),
                         position + cols_q.size + np.arange(rows_q.size)]
            recv_val += [v[post], np.ones(rows_q.size)]
            position += cols_q.size + rows_q.size
            moved_row.append(np.searchsorted(rows_q, r[~post]))  # row of q's B_me
            moved_col.append(c[~post])
            moved_val.append(v[~post])
            moved_counts[q] = int((~post).sum())
        self.recv_rows_from = post_counts + pre_counts  # rows q sends me per SpMM
        self.M_recv = LocalCSR(sp.csr_array(
            (_cat(recv_val, np.float64), (_cat(recv_row, np.int64), _cat(recv_col, np.int64))),
            shape=(self.n_local, position)))
        # tell each sender q which X rows I need and which pre non-zeros it now multiplies
        got_cols = _alltoallv(comm, _cat(post_cols, np.int64), post_counts, MPI.INT64_T)
        pre_from = np.empty(k, dtype=np.int64)
        comm.Alltoall(pre_counts, pre_from)
        post_from = np.empty(k, dtype=np.int64)
        comm.Alltoall(post_counts, post_from)
        m_rows = _alltoallv(comm, _cat(moved_row, np.int64), moved_counts, MPI.INT64_T)
        m_cols = _alltoallv(comm, _cat(moved_col, np.int64), moved_counts, MPI.INT64_T)
        m_vals = _alltoallv(comm, _cat(moved_val, np.float64), moved_counts, MPI.DOUBLE)
        moved_from = np.empty(k, dtype=np.int64)
        comm.Alltoall(moved_counts, moved_from)
        # my send buffer: [the X rows any receiver needs, once each ; per receiver p the
        # partial sums of p's rows], so receivers on one node share the X rows (node-aware)
        union = np.unique(got_cols)
        pre_start = union.size + displacements(pre_from)
        nz_at = displacements(moved_from)
        send_row, send_col, send_val = [np.arange(union.size)], [union - self.col_lo], \
            [np.ones(union.size)]
        for p in range(k):
            a, b = nz_at[p], nz_at[p] + moved_from[p]
            send_row.append(pre_start[p] + m_rows[a:b])
            send_col.append(m_cols[a:b] - self.col_lo)
            send_val.append(m_vals[a:b])
        n_send = int(union.size + pre_from.sum())
        self.M_send = LocalCSR(sp.csr_array(
            (_cat(send_val, np.float64), (_cat(send_row, np.int64), _cat(send_col, np.int64))),
            shape=(n_send, self.n_local_in)))
        # the halo plan runs over the send buffers' rows: rank q "owns" its n_send rows; each
        # receiver learns where its X rows and its partial sums sit in q's buffer
        sizes = np.array(allgather_json(comm, int(n_send)), dtype=np.int64)
        self._virtual_offsets = np.r_[0, np.cumsum(sizes)].astype(np.int64)
        at = _alltoallv(comm, np.searchsorted(union, got_cols), post_from, MPI.INT64_T)
        starts = np.empty(k, dtype=np.int64)
        comm.Alltoall(pre_start.astype(np.int64), starts)
        post_at = displacements(post_counts)
        self._ghost_virtual = np.concatenate(
            [self._virtual_offsets[q] + np.r_[at[post_at[q]:post_at[q] + post_counts[q]],
                                              starts[q] + np.arange(pre_counts[q])]
             for q in range(k)] or [np.zeros(0, np.int64)]).astype(np.int64)

    def exchange_plans(self) -> list:
        return [self.plan]

    def local_nnz(self) -> int:
        return self._nnz

    def local_matrices(self) -> list:
        return [self.diag, self.M_recv, self.M_send]

    def backend_blocks(self) -> list:
        return [self.own, *self.received.ghosts, self.pre]

    # ------------------------------------------------------------ per call
    def _matmul(self, x, out, key: int) -> None:
        f, plan, stats = x.shape[1], self.plan, self.stats
        # M_send's rows (the rows this rank "owns" in the plan; the plan may send some twice)
        send = plan.buffer("pre_send", self.M_send.shape[0], f, self.backend.dtype(x))
        with stats.timing("seconds_multiply"):
            self.pre.matmul(x, send, accumulate=False)  # X rows + pre-aggregated sums
        started = self.received.start_bcast(send, key)
        with stats.timing("seconds_multiply"):
            self.own.matmul(x, out, accumulate=False)
        self.received.finish_bcast(started, out)  # + M_recv R

    def _matmul_t(self, y, out, key: int) -> None:
        f, plan, stats = y.shape[1], self.plan, self.stats
        back = plan.buffer("pre_back", self.M_send.shape[0], f, self.backend.dtype(y))
        back[:] = 0
        pending = self.received.start_reduce(y, back, key)  # M_recv^T Y_p to the senders
        with stats.timing("seconds_multiply"):
            self.own.t_matmul(y, out, accumulate=False)
        pending.finish()
        with stats.timing("seconds_multiply"):
            self.pre.t_matmul(back, out, accumulate=True)
