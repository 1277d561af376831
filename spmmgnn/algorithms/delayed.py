"""Delayed remote aggregates (DistGNN §5.3: cd-r, and 0c) on a ``sparse1d`` operator.

A rank's product splits into its own block and the remote part,
``Z_i = A_i,own X_own + A_i,ghost X[ghost]``. With staleness R the remote part used in the
t-th call of a slot is the one whose rows were *sent* in call t - R: every call posts its
exchange (non-blocking) and lands the one posted R calls earlier, so the rows travel while
R epochs compute (inter-epoch overlap). Calls t < R have no remote part yet. R = 0 is the
exact product. ``drop`` (0c) never exchanges: the remote part is always zero.

A slot is one (layer, direction): ``views(L)`` returns one operator per layer for the layers'
aggregations; each is called once per training step forward (``matmul``) and, when its input
needs a gradient, once backward (``matmul_t``: the partial sums for ghost columns are reduced
R calls later in the same way). These change the model's mathematics (the gradient is not that
of the loss any more); evaluation should use the exact operator.

Unlike DistGNN, every split vertex is refreshed every epoch (no binning into R subsets), so
the bytes per epoch equal ``sparse1d``'s; only their latency is hidden.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from ..convert import like_input
from ..errors import SpmmgnnError
from .base import DistSpMM


class DelayedRemote:
    """Per-layer delayed views of one ``sparse1d`` operator, and the exchanges in flight."""

    def __init__(self, op: DistSpMM, staleness: int = 0, drop: bool = False):
        if op.name != "sparse1d":
            raise SpmmgnnError(f"delayed remote aggregates need algorithm sparse1d, got "
                               f"{op.name}")
        if staleness < 0:
            raise SpmmgnnError(f"staleness must be >= 0, got {staleness}")
        self.op, self.staleness, self.drop = op, int(staleness), bool(drop)
        self._views: list[DelayedView] = []

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
    everything else (rows, grid, stats) is the wrapped operator's."""

    symmetric = False  # the backward must take its own (delayed) path

    def __init__(self, owner: DelayedRemote, layer: int):
        self._owner, self.layer = owner, layer
        self._op = owner.op
        self._calls = [0, 0]                            # per direction
        self._pending: tuple[deque, deque] = (deque(), deque())  # Exchanges in flight

    def __getattr__(self, name):
        return getattr(self._op, name)

    def _slot(self, direction: int) -> tuple[int, int, int]:
        t = self._calls[direction]
        self._calls[direction] += 1
        return (self.layer, direction, t % (self._owner.staleness + 1))

    def matmul(self, X_local, stream: int | None = None):
        op = self._op
        x = op._check_local(X_local, "matmul", op.n_local_in)
        out = np.empty((op.n_local, x.shape[1]), dtype=x.dtype)
        op.stats.calls_matmul += 1
        prod, stats = op.product, op.stats
        slot = self._slot(0)
        if not self._owner.drop:
            ghost = prod.plan.buffer("ghost", prod.plan.n_ghost, x.shape[1], x.dtype, slot)
            self._pending[0].append(prod.plan.start_bcast(x, ghost, stats, prod.codec,
                                                          op._key(stream, 0), slot))
        with stats.timing("seconds_multiply"):
            prod.diag.matmul(x, out, accumulate=False)
        if len(self._pending[0]) > self._owner.staleness:
            exchange = self._pending[0].popleft()
            exchange.finish()
            with stats.timing("seconds_multiply"):
                prod.ghost.matmul(exchange.target, out, accumulate=True)
        return like_input(out, X_local)

    def matmul_t(self, Y_local, stream: int | None = None):
        op = self._op
        y = op._check_local(Y_local, "matmul_t", op.n_local)
        out = np.empty((op.n_local_in, y.shape[1]), dtype=y.dtype)
        op.stats.calls_matmul_t += 1
        prod, stats = op.product, op.stats
        slot = self._slot(1)
        if not self._owner.drop:
            partial = prod.plan.buffer("partial", prod.plan.n_ghost, y.shape[1], y.dtype, slot)
            with stats.timing("seconds_multiply"):
                prod.ghost.t_matmul(y, partial, accumulate=False)
            self._pending[1].append(prod.plan.start_reduce(partial, stats, prod.codec_backward,
                                                           op._key(stream, 1), slot))
        with stats.timing("seconds_multiply"):
            prod.diag.t_matmul(y, out, accumulate=False)
        if len(self._pending[1]) > self._owner.staleness:
            self._pending[1].popleft().finish(out)
        return like_input(out, Y_local)

    def drain(self) -> None:
        """Wait for every exchange still in flight, discarding what arrives."""
        for pending in self._pending:
            while pending:
                pending.popleft().request.Wait()
