"""The sparsity-aware product of one rank's multiplied block columns, shared by the sparse
algorithms: ``Z_i = A_i,own X_own + A_i,ghost X[ghost]`` with the ghost rows fetched by the
halo plan while the owned block is multiplied (and the mirror for ``A^T Y``).

``diag`` holds the columns this rank owns in the column layout (local numbering), ``ghost``
the other non-empty columns renumbered 0..g-1 (``local_matrix.split_columns``); the halo plan
is built on the communicator across block rows, so in 1.5D each replica exchanges with the
ranks of its own replica index only.
"""

from __future__ import annotations

from time import perf_counter

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from ..codecs import get_codec
from ..errors import SpmmgnnError, agree
from ..halo import HaloPlan
from ..local_matrix import split_columns
from ..stats import CommStats


def resolve_codecs(comm: MPI.Comm, codec: str | None, codec_backward: str | None):
    """(forward codec, backward codec) by name, agreed on every rank; ``"same"`` reuses the
    forward codec for the backward exchange."""
    error, fwd, bwd = None, None, None
    try:
        fwd = get_codec(codec)
        bwd = fwd if codec_backward == "same" else get_codec(codec_backward)
    except SpmmgnnError as exc:
        error = str(exc)
    agree(comm, error)
    return fwd, bwd


class GhostProduct:
    """Owned/ghost split of a block row plus its halo plan; multiplies with overlap."""

    def __init__(self, block_row: sp.csr_array, comm: MPI.Comm, col_offsets: np.ndarray,
                 col_lo: int, col_hi: int, stats: CommStats, codec=None, codec_backward=None,
                 seed: int = 0, stream: int = 0, make_plan=None):
        """``make_plan(comm, offsets, ghost_ids, codec, codec_backward, seed, stream)``
        builds the halo plan (the operator's ``halo_plan``: flat, node-aware or auto);
        None: a flat ``HaloPlan`` counting into ``stats``."""
        self.diag, self.ghost, ghost_ids = split_columns(block_row, col_lo, col_hi)
        if make_plan is None:
            self.plan = HaloPlan(comm, col_offsets, ghost_ids, stats, codec, codec_backward,
                                 seed=seed, stream=stream)
        else:
            self.plan = make_plan(comm, col_offsets, ghost_ids, codec, codec_backward, seed,
                                  stream)
        self.stats = stats
        self.codec, self.codec_backward = codec, codec_backward
        # a node plan sharing memory (or ``auto``'s, when it picks it): the ghost block reads
        # its rows where they lie in the node's window (same terms, same order: the same
        # bits as through ``ghost``)
        node = getattr(self.plan, "node", self.plan)
        self.in_place = bool(getattr(node, "reads_in_place", False))
        self._ghost_rows = None  # ``ghost`` renamed into the window, made at its first use
        # one rank with a flat plan: nothing crosses ranks, so no exchange machinery runs
        # (the call still counts its empty exchange, as the plan would)
        self.alone = comm.Get_size() == 1 and isinstance(self.plan, HaloPlan)

    @property
    def nnz(self) -> int:
        return self.diag.nnz + self.ghost.nnz

    def matrices(self) -> list:
        return [self.diag, self.ghost]

    def _chosen(self, forward: bool, x: np.ndarray):
        """The plan this call runs: ``auto``'s pick for a product that reads in place (the
        flat or the node plan itself, so the call runs what was priced), or the one plan."""
        return self.plan.choose(forward, x) if self.in_place and hasattr(
            self.plan, "choose") else self.plan

    def matmul(self, x: np.ndarray, out: np.ndarray, key: int) -> None:
        """out = A x: post the ghost fetch, multiply the owned block, land ghosts, add."""
        stats = self.stats
        if self.alone:
            stats.exchanges += 1  # (count_exchange(0, 0): no bytes, one exchange)
            with stats.timing("seconds_multiply"):
                self.diag.matmul(x, out, accumulate=False)
            return
        plan = self._chosen(True, x)
        if getattr(plan, "reads_in_place", False):
            pending = plan.start_bcast_in_place(x, key)
            t0 = perf_counter()
            self.diag.matmul(x, out, accumulate=False)
            t1 = perf_counter()
            rows = pending.finish()
            t2 = perf_counter()
            if self._ghost_rows is None:
                self._ghost_rows = self.ghost.renamed(plan.ghost_slots, plan.rows_total)
            self._ghost_rows.matmul(rows, out, accumulate=True)
            stats.seconds_multiply += (t1 - t0) + (perf_counter() - t2)
            return
        ghost_x = plan.buffer("ghost", plan.n_ghost, x.shape[1], x.dtype)
        pending = plan.start_bcast(x, ghost_x, key)
        t0 = perf_counter()  # (two reads a product instead of a context manager each)
        self.diag.matmul(x, out, accumulate=False)
        t1 = perf_counter()
        pending.finish()
        t2 = perf_counter()
        self.ghost.matmul(ghost_x, out, accumulate=True)
        stats.seconds_multiply += (t1 - t0) + (perf_counter() - t2)

    def matmul_t(self, y: np.ndarray, out: np.ndarray, key: int) -> None:
        """out = A^T y: partial sums for ghost columns first, post their reduce, multiply the
        owned block while they travel, then add what peers computed for my rows."""
        stats = self.stats
        if self.alone:
            stats.exchanges += 1
            with stats.timing("seconds_multiply"):
                self.diag.t_matmul(y, out, accumulate=False)
            return
        plan = self._chosen(False, y)
        partial = (plan.reduce_partials(y.shape[1], y.dtype)
                   if getattr(plan, "reads_in_place", False) else None)
        if partial is None:
            partial = plan.buffer("ghost", plan.n_ghost, y.shape[1], y.dtype)
        with stats.timing("seconds_multiply"):
            self.ghost.t_matmul(y, partial, accumulate=False)
        pending = plan.start_reduce(partial, out, key)  # (auto: the plan chosen above)
        with stats.timing("seconds_multiply"):
            self.diag.t_matmul(y, out, accumulate=False)
        pending.finish()
