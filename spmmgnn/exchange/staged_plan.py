"""A node-aware (or auto) plan on a backend whose arrays are not numpy: its legs live in MPI
messages and shared-memory windows, which hold host rows, so each call runs the plan's own
verbs on host copies. A bcast stages the whole block of rows to the host (the plan picks
the rows it sends there, by its own index lists), lands the ghost rows in a host buffer and
brings them back; a reduce stages the partial sums and adds what arrives for the owned rows
from a host buffer. The copies are counted as the ``device_host`` tier of the plan's
statistics; the plan's choices, bytes and tiers are those of the numpy path."""

from __future__ import annotations

from ..backend.protocol import Backend


class StagedExchange:
    """One staged exchange in flight: ``finish()`` lands it in the backend array."""

    __slots__ = ("dst", "host", "pending", "plan", "reduce")

    def __init__(self, plan: StagedPlan, pending, host, dst, reduce: bool):
        self.plan, self.pending, self.host, self.dst, self.reduce = (plan, pending, host,
                                                                     dst, reduce)

    def wait(self) -> None:
        self.pending.wait()

    def finish(self, into=None):
        dst = self.dst if into is None else into
        self.pending.finish()
        be, stats = self.plan.backend, self.plan.stats
        with stats.timing("seconds_exchange"):
            back = be.from_host(self.host, stats)
            if self.reduce:
                dst += back
            else:
                dst[...] = back
        return dst


class StagedPlan:
    """``plan`` (a ``NodePlan`` or ``AutoPlan``) on ``backend``'s arrays through host
    copies. Everything else (volumes, counts, choices) is the plan's."""

    reads_in_place = False

    def __init__(self, plan, backend: Backend):
        self.plan, self.backend = plan, backend
        self.pool = backend.pool()

    def __getattr__(self, name: str):
        return getattr(self.plan, name)

    @property
    def node(self) -> StagedPlan:
        """The plan a ``GhostBlock`` asks whether it reads rows in place: this one, which
        never does (an ``auto`` plan's node-aware half would, on host rows only)."""
        return self

    def buffer(self, name: str, rows: int, f: int, dtype, slot: int = 0):
        """A reusable (rows x f) backend array (the ghost rows, partial sums)."""
        return self.pool.get(name, (rows, f), dtype, slot)

    def release_buffers(self) -> None:
        self.pool = self.backend.pool()
        if hasattr(self.plan, "release_buffers"):
            self.plan.release_buffers()

    def start_bcast(self, x_local, ghost, key: int = 0, slot: int = 0) -> StagedExchange:
        stats, be = self.plan.stats, self.backend
        with stats.timing("seconds_exchange"):
            host_x = be.to_host(x_local, stats)
        host_ghost = self.plan.buffer("staged_ghost", self.plan.n_ghost, x_local.shape[1],
                                      host_x.dtype, slot)
        pending = self.plan.start_bcast(host_x, host_ghost, key, slot)
        return StagedExchange(self, pending, host_ghost, ghost, reduce=False)

    def start_reduce(self, ghost_partial, out_local=None, key: int = 0,
                     slot: int = 0) -> StagedExchange:
        stats, be = self.plan.stats, self.backend
        with stats.timing("seconds_exchange"):
            host_partial = be.to_host(ghost_partial, stats)
        acc = self.plan.buffer("staged_acc", out_local.shape[0], ghost_partial.shape[1],
                               host_partial.dtype, slot)
        acc[...] = 0
        pending = self.plan.start_reduce(host_partial, acc, key, slot)
        return StagedExchange(self, pending, acc, out_local, reduce=True)

    def bcast(self, x_local, ghost, key: int = 0) -> None:
        self.start_bcast(x_local, ghost, key).finish()

    def reduce(self, ghost_partial, out_local, key: int = 0) -> None:
        self.start_reduce(ghost_partial, out_local, key).finish()
