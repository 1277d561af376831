"""Delayed remote partial aggregates (DistGNN §5.3, Algorithm 4: cd-r, and 0c) on ``sparse1d``.

A rank's product splits into its own block and the remote part,
``Z_i = A_i,own X_own + A_i,ghost X[ghost]``. cd-r splits the ghost rows into r bins
S_0 .. S_{r-1} (``GhostBins``); call t of a layer posts bin ``b = t mod r`` of the current
rows (non-blocking) and lands the same bin's rows posted r calls earlier into the layer's
ghost buffer, which the product then uses as it stands: each ghost row is refreshed once
every r calls with rows r calls old, so each call sends 1/r of ``sparse1d``'s rows and the
transfer has r calls to complete. Before a bin first lands its rows are zero (calls t < r
see part of the remote aggregate, then all of it). ``drop`` (0c) never exchanges; r = 0 is
the exact product.

The backward (``matmul_t``) follows ``backward``:

* ``"local"`` (default): the remote part of the forward is a constant read from the ghost
  buffer, so the gradient of what was computed is the owned block's alone,
  ``A_own^T Y``; nothing is sent.
* ``"delayed"``: Algorithm 4 applied to the transpose: the partial sums for bin b's ghost
  columns are reduced into their owners r calls later, so the gradient of step t carries
  remote contributions of step t - r.

The choice and the measured accuracies behind it are in ``bench/results/delayed.md``.
These change the model's mathematics; evaluation uses the exact operator. The views are
written once against the grid's backend and transport: the rows, ghost buffers and products
are the backend's arrays (numpy, or torch tensors on the grid's device) and each bin's halo
plan moves them by the grid's link, as ``sparse1d``'s own exchange does.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from ..exchange.halo import Exchange
from ..local.hashing import hash_ids
from ..runtime.errors import SpmmgnnError
from .base import DistSpMM

BACKWARDS = ("local", "delayed")


def ghost_bins(ghost_ids: np.ndarray, recv_counts: np.ndarray, r: int, seed: int) -> np.ndarray:
    """Bin (0..r-1) of each ghost row: within each owner's rows, in the order of a seeded hash
    of the global id, dealt round-robin, so every peer's rows (bytes) split evenly over the
    bins (counts differ by at most one) and the bins do not depend on P's numbering."""
    owner = np.repeat(np.arange(recv_counts.size), recv_counts)
    order = np.lexsort((hash_ids(ghost_ids, seed), owner))
    start = np.repeat(np.cumsum(recv_counts) - recv_counts, recv_counts)
    bins = np.empty(ghost_ids.size, dtype=np.int64)
    bins[order] = (np.arange(ghost_ids.size) - start) % max(r, 1)
    return bins


class GhostBins:
    """Algorithm 4's S_1..S_r for one rank: the positions of each bin's rows in the ghost
    buffer and one halo plan per bin (collective, built once)."""

    def __init__(self, op: DistSpMM, r: int, seed: int = 0):
        plan = op.product.plan
        self.bin_of = ghost_bins(plan.ghost_ids, plan.recv_counts, r, seed)
        self.rows = [np.flatnonzero(self.bin_of == b) for b in range(r)]
        self.plans = [op.halo_plan(plan.comm, op.col_offsets, plan.ghost_ids[rows],
                                   plan.codec, plan.codec_backward, seed, op.grid.rank)
                      for rows in self.rows]


class DelayedRemote:
    """Per-layer delayed views of one operator that takes delayed remote aggregates
    (``delayed_remote``: ``sparse1d``), and the exchanges in flight."""

    def __init__(self, op: DistSpMM, staleness: int = 0, drop: bool = False,
                 backward: str = "local", seed: int = 0):
        if not op.delayed_remote:
            raise SpmmgnnError(f"delayed remote aggregates need an algorithm that takes them "
                               f"(delayed_remote), got {op.name}")
        if staleness < 0:
            raise SpmmgnnError(f"staleness must be >= 0, got {staleness}")
        if backward not in BACKWARDS:
            raise SpmmgnnError(f"backward must be one of {BACKWARDS}, got {backward!r}")
        self.op, self.staleness, self.drop = op, int(staleness), bool(drop)
        self.backward = backward
        self.bins = GhostBins(op, self.staleness, seed) if self.staleness and not drop else None
        self._views: list[DelayedView] = []

    def remote_share(self) -> float:
        """Share of all ranks' non-zeros in ghost columns: the part of every aggregate that
        cd-r makes stale and 0c drops (collective)."""
        prod = self.op.product
        counts = np.array([prod.ghost.nnz, prod.nnz], dtype=np.int64)
        self.op.grid.comm.Allreduce(MPI.IN_PLACE, counts, op=MPI.SUM)
        return float(counts[0] / counts[1]) if counts[1] else 0.0

    def views(self, layers: int) -> list[DelayedView]:
        """One operator per layer (created once, then the same objects)."""
        while len(self._views) < layers:
            self._views.append(DelayedView(self, len(self._views)))
        return self._views[:layers]

    def close(self) -> None:
        """Complete every exchange still in flight (collective; call once training ends)."""
        for v in self._views:
            v.drain()


class DelayedView:
    """The operator one layer uses: ``matmul``/``matmul_t`` with the delayed remote part;
    its rows, grid and statistics are the wrapped operator's (read through its public
    methods only)."""

    symmetric = False  # the backward must take its own (delayed) path
    stale_remote = True  # layers aggregate first: (A H) W, so W meets the stale rows fresh

    def __init__(self, owner: DelayedRemote, layer: int):
        self._owner, self.layer = owner, layer
        self._op = owner.op
        self._calls = [0, 0]                                  # per direction
        self._pending: list[dict[int, Exchange]] = [{}, {}]   # call posted -> exchange
        self._stale: dict[tuple, object] = {}                 # (f, dtype) -> ghost rows
        # the owned and the ghost block as the backend multiplies them
        self._own, self._ghost = owner.op.product.blocks_on_backend()

    # what the layers and the trainer read of an operator, the wrapped operator's
    @property
    def n_local(self) -> int:
        return self._op.n_local

    @property
    def n_local_in(self) -> int:
        return self._op.n_local_in

    @property
    def grid(self):
        return self._op.grid

    @property
    def name(self) -> str:
        return self._op.name

    @property
    def stats(self):
        return self._op.stats

    def comm_stats(self) -> dict:
        return self._op.comm_stats()

    def row_ids(self, side: str = "output") -> np.ndarray:
        return self._op.row_ids(side)

    def _exact(self) -> bool:
        return not self._owner.drop and self._owner.staleness == 0

    def _bin(self, direction: int) -> tuple[int, int, tuple]:
        """(call t, bin b, buffer slot) of this call; a bin alternates two buffer slots so
        the rows it posts do not overwrite the ones still in flight."""
        t = self._calls[direction]
        self._calls[direction] += 1
        r = self._owner.staleness
        return t, t % r, (self.layer, direction, (t // r) % 2)

    def matmul(self, X_local, stream: int | None = None):
        op = self._op
        if self._exact():
            return op.matmul(X_local, stream)
        be, stats = op.backend, op.stats
        x = op.check_local(X_local, "matmul", op.n_local_in)
        f, dtype = x.shape[1], be.dtype(x)
        out = be.empty((op.n_local, f), dtype)
        stats.calls_matmul += 1
        if self._owner.drop:
            with stats.timing("seconds_multiply"):
                self._own.matmul(x, out, accumulate=False)
            return be.like(out, X_local)
        t, b, slot = self._bin(0)
        plan = self._owner.bins.plans[b]
        landing = plan.buffer("ghost", plan.n_ghost, f, dtype, slot)
        posted = plan.start_bcast(x, landing, op.rounding_key(stream, 0), slot)
        with stats.timing("seconds_multiply"):
            self._own.matmul(x, out, accumulate=False)
        stale = self._stale_rows(f, dtype)
        earlier = self._pending[0].pop(t - self._owner.staleness, None)
        if earlier is not None:
            be.put_rows(earlier.finish(), self._owner.bins.rows[b], stale)
        self._pending[0][t] = posted
        with stats.timing("seconds_multiply"):
            self._ghost.matmul(stale, out, accumulate=True)
        return be.like(out, X_local)

    def _stale_rows(self, f: int, dtype):
        """The layer's ghost rows at width f (zeros until a bin lands)."""
        key = (f, np.dtype(dtype))
        if key not in self._stale:
            self._stale[key] = self._op.backend.zeros((self._op.product.plan.n_ghost, f),
                                                      dtype)
        return self._stale[key]

    def matmul_t(self, Y_local, stream: int | None = None):
        op = self._op
        if self._exact():
            return op.matmul_t(Y_local, stream)
        be, stats, prod = op.backend, op.stats, op.product
        y = op.check_local(Y_local, "matmul_t", op.n_local)
        f, dtype = y.shape[1], be.dtype(y)
        out = be.empty((op.n_local_in, f), dtype)
        stats.calls_matmul_t += 1
        posted = None
        if not self._owner.drop and self._owner.backward == "delayed":
            t, b, slot = self._bin(1)
            plan = self._owner.bins.plans[b]
            partial = prod.plan.buffer("partial", prod.plan.n_ghost, f, dtype)
            with stats.timing("seconds_multiply"):
                self._ghost.t_matmul(y, partial, accumulate=False)
            send = plan.buffer("partial_send", plan.n_ghost, f, dtype, slot)
            be.gather_rows(partial, self._owner.bins.rows[b], send)
            posted = plan.start_reduce(send, None, op.rounding_key(stream, 1), slot)
        with stats.timing("seconds_multiply"):
            self._own.t_matmul(y, out, accumulate=False)
        if posted is not None:
            earlier = self._pending[1].pop(t - self._owner.staleness, None)
            if earlier is not None:
                earlier.finish(into=out)
            self._pending[1][t] = posted
        return be.like(out, Y_local)

    def drain(self) -> None:
        """Wait for every exchange still in flight, discarding what arrives."""
        for pending in self._pending:
            for exchange in pending.values():
                exchange.wait()
            pending.clear()
