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

from ..backend.host import HOST
from ..backend.protocol import Backend
from ..exchange.halo import HaloPlan
from ..local.codecs import get_codec
from ..local.split import split_columns
from ..runtime.errors import SpmmgnnError, agree
from ..runtime.stats import CommStats


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
                 seed: int = 0, stream: int = 0, make_plan=None, backend: Backend = HOST):
        """``make_plan(comm, offsets, ghost_ids, codec, codec_backward, seed, stream)``
        builds the halo plan (the operator's ``halo_plan``: flat, node-aware or auto, on its
        grid's backend and transport); None: a flat ``HaloPlan`` counting into ``stats``.
        The blocks multiply on ``backend``."""
        self.diag, self.ghost, ghost_ids = split_columns(block_row, col_lo, col_hi)
        if make_plan is None:
            self.plan = HaloPlan(comm, col_offsets, ghost_ids, stats, codec, codec_backward,
                                 seed=seed, stream=stream, backend=backend)
        else:
            self.plan = make_plan(comm, col_offsets, ghost_ids, codec, codec_backward, seed,
                                  stream)
        self.stats = stats
        self.codec, self.codec_backward = codec, codec_backward
        self.own, ghost = backend.block(self.diag), backend.block(self.ghost)
        self.block = GhostBlock([ghost], self.plan, stats)
        # one rank with a flat plan: nothing crosses ranks, so no exchange machinery runs
        # (the call still counts its empty exchange, as the plan would)
        self.alone = comm.Get_size() == 1 and isinstance(self.plan, HaloPlan)

    @property
    def in_place(self) -> bool:
        return self.block.in_place

    @property
    def nnz(self) -> int:
        return self.diag.nnz + self.ghost.nnz

    def matrices(self) -> list:
        return [self.diag, self.ghost]

    def blocks_on_backend(self) -> list:
        return [self.own, *self.block.ghosts]

    def matmul(self, x, out, key: int) -> None:
        """out = A x: post the ghost fetch, multiply the owned block, land ghosts, add."""
        stats = self.stats
        if self.alone:
            stats.exchanges += 1  # (count_exchange(0, 0): no bytes, one exchange)
            with stats.timing("seconds_multiply"):
                self.own.matmul(x, out, accumulate=False)
            return
        started = self.block.start_bcast(x, key)
        t0 = perf_counter()  # (two reads instead of a context manager: the per-call cost)
        self.own.matmul(x, out, accumulate=False)
        stats.seconds_multiply += perf_counter() - t0
        self.block.finish_bcast(started, out)

    def matmul_t(self, y, out, key: int) -> None:
        """out = A^T y: partial sums for ghost columns first, post their reduce, multiply the
        owned block while they travel, then add what peers computed for my rows."""
        stats = self.stats
        if self.alone:
            stats.exchanges += 1
            with stats.timing("seconds_multiply"):
                self.own.t_matmul(y, out, accumulate=False)
            return
        pending = self.block.start_reduce(y, out, key)
        with stats.timing("seconds_multiply"):
            self.own.t_matmul(y, out, accumulate=False)
        pending.finish()


class GhostBlock:
    """Blocks multiplied by rows that other ranks own (``ghosts``: each block's columns
    numbered as the plan's ghosts) and the halo plan that fetches them: read where they lie
    in the node's rows window when the plan reads in place (``NodePlan.reads_in_place``;
    ``auto`` where it picks the node plan), else landed in a ghost buffer. A block renamed
    into the window (columns = the rows' places, terms in order) multiplies to the same
    bits. The reduce's partial sums (ghost order) are made where the node's reduce reads
    them when it can (``partials``). ``names``: the plan buffers of the landed rows and of
    the partial sums."""

    def __init__(self, ghosts: list, plan, stats: CommStats,
                 names: tuple[str, str] = ("ghost", "ghost")):
        self.ghosts, self.plan, self.stats, self.names = ghosts, plan, stats, names
        node = getattr(plan, "node", plan)
        self.in_place = bool(getattr(node, "reads_in_place", False))
        self._renamed: list = [None] * len(ghosts)  # made at their first use

    def _chosen(self, forward: bool, x):
        """The plan this call runs: ``auto``'s pick for a call that reads in place (the
        flat or the node plan itself, so the call runs what was priced), or the one plan."""
        return self.plan.choose(forward, x) if self.in_place and hasattr(
            self.plan, "choose") else self.plan

    def start_bcast(self, x, key: int, in_place: bool = True) -> tuple:
        """Post the fetch of the ghost rows of ``x`` (the plan's owned rows); the caller
        multiplies its own block meanwhile, then ``land``s them. ``in_place=False``: into
        the ghost buffer whatever the plan (for blocks that cannot read from the window)."""
        plan = self._chosen(True, x) if in_place else self.plan
        if in_place and getattr(plan, "reads_in_place", False):
            return plan, plan.start_bcast_in_place(x, key), None
        ghost_x = plan.buffer(self.names[0], plan.n_ghost, x.shape[1], _dtype(plan, x))
        return plan, plan.start_bcast(x, ghost_x, key), ghost_x

    def land(self, started: tuple):
        """Wait for the rows of ``start_bcast``: the window's half holding them, or the
        ghost buffer (what ``times`` multiplies)."""
        _, pending, ghost_x = started
        rows = pending.finish()
        return rows if ghost_x is None else ghost_x

    def times(self, i: int, started: tuple, rows, out) -> None:
        """out += ghosts[i] @ the landed ``rows`` (timed as multiplying)."""
        t0 = perf_counter()
        if started[2] is None:
            if self._renamed[i] is None:
                plan = started[0]
                self._renamed[i] = self.ghosts[i].renamed(plan.ghost_slots, plan.rows_total)
            self._renamed[i].matmul(rows, out, accumulate=True)
        else:
            self.ghosts[i].matmul(rows, out, accumulate=True)
        self.stats.seconds_multiply += perf_counter() - t0

    def finish_bcast(self, started: tuple, out) -> None:
        """``land`` and add ``ghosts[0] @ rows`` into ``out``."""
        self.times(0, started, self.land(started), out)

    def partials(self, f: int, dtype) -> tuple:
        """(plan, buffer): the plan a reduce of (n_ghost x f) partial sums runs and where
        to make them (the node's window when its reduce reads them there)."""
        plan = self._chosen(False, np.empty((0, f), dtype)) if self.in_place else self.plan
        partial = (plan.reduce_partials(f, dtype)
                   if getattr(plan, "reads_in_place", False) else None)
        if partial is None:
            partial = plan.buffer(self.names[1], plan.n_ghost, f, dtype)
        return plan, partial

    def start_reduce(self, y, out, key: int):
        """Post the partial sums ``ghosts[0]^T y`` to be added into their owners' ``out``
        by the returned exchange's ``finish()``; ``out`` may be written before then (the
        sums are added)."""
        plan, partial = self.partials(y.shape[1], _dtype(self.plan, y))
        with self.stats.timing("seconds_multiply"):
            self.ghosts[0].t_matmul(y, partial, accumulate=False)
        return plan.start_reduce(partial, out, key)  # (auto: the plan chosen above)


def _dtype(plan, x) -> np.dtype:
    """numpy's dtype of ``x``, an array of ``plan``'s backend."""
    backend = getattr(plan, "backend", HOST)
    return backend.dtype(x)
