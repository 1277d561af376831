"""The delayed views (``delayed.py``: DistGNN cd-r and 0c) of a ``sparse1d`` operator on its
device grid: the same calls with torch tensors that stay on the device.

cd-r's call t gathers bin ``b = t mod r``'s send rows on the device, stages them through
the bin's own halo plan (``DeviceRoute``: every codec on the device, only packed rows
staged, pinned buffers and a copy stream on CUDA, or device tensors to a CUDA-aware MPI),
multiplies the owned block meanwhile, and lands the rows that bin posted r calls earlier
into the layer's ghost tensor (``index_copy_``), which the ghost block then multiplies as
it stands. The delayed backward sends bin b's partial sums the same way and adds what
arrives r calls later into the owners' rows (``index_add_``). 0c multiplies the owned
block alone. Each in-flight exchange keeps its buffers under the view's slot (layer,
direction, parity), as on the CPU path.
"""

from __future__ import annotations

from dataclasses import dataclass

from .device_products import DeviceRoute
from .on_device import check_tensor


@dataclass
class InFlight:
    """One posted bin exchange: its route, request, receive buffer and codec."""

    route: DeviceRoute
    request: object
    recv: object
    posted: float
    codec: object

    def wait(self) -> None:
        self.route.wait(self.request, self.posted)

    def finish(self, dtype, f: int):
        """Wait, then what arrived as ``dtype`` rows on the device."""
        self.wait()
        return self.route.arrived(self.codec, self.recv, dtype, f)


class DeviceDelayed:
    """The device side of one ``DelayedRemote``: a route per bin and the bins' index
    tensors (built once). The calls take the view's state: ``next_bin()`` gives (call t,
    bin b, buffer slot) and advances the view's count, ``pending`` maps a call to its
    exchange in flight, ``stale`` keeps the ghost tensor per width."""

    def __init__(self, owner):
        import torch

        op = owner.op
        self.owner, self.op = owner, op
        self.product = op.device_path.product   # the operator's DeviceProduct (its blocks)
        device = op.grid.device
        bins = owner.bins
        self.routes = [] if bins is None else [DeviceRoute(p, op.stats, device)
                                               for p in bins.plans]
        self.send_idx = [] if bins is None else [
            torch.from_numpy(p.send_idx).to(device) for p in bins.plans]
        self.ghost_rows = [] if bins is None else [
            torch.from_numpy(rows).to(device) for rows in bins.rows]

    def ghost_tensor(self, stale: dict, f: int, dtype):
        """The view's ghost tensor at width f (zeros until a bin lands)."""
        import torch

        key = (f, dtype)
        if key not in stale:
            stale[key] = torch.zeros((self.op.product.plan.n_ghost, f), dtype=dtype,
                                     device=self.op.grid.device)
        return stale[key]

    def matmul(self, X, stream, next_bin, pending: dict, stale: dict):
        op, dp, owner = self.op, self.product, self.owner
        x = check_tensor(op, X, "matmul", op.n_local_in).detach().contiguous()
        op.stats.calls_matmul += 1
        stats = op.stats
        if owner.drop:
            with stats.timing("seconds_multiply"):
                return dp.diag.matmul(x)
        t, b, slot = next_bin()
        route, name = self.routes[b], "-".join(map(str, slot))
        with stats.timing("seconds_exchange"):
            send = x.index_select(0, self.send_idx[b])
        host, params = route.wire(dp.codec, send, x.dtype, op.rounding_key(stream, 0),
                                  "dev_enc_send" + name)
        request, recv, posted = route.post(host, route.plan.n_ghost, True, params, name)
        with stats.timing("seconds_multiply"):
            out = dp.diag.matmul(x)
        ghost = self.ghost_tensor(stale, x.shape[1], x.dtype)
        earlier = pending.pop(t - owner.staleness, None)
        if earlier is not None:
            rows = earlier.finish(x.dtype, x.shape[1])
            with stats.timing("seconds_exchange"):
                ghost.index_copy_(0, self.ghost_rows[b], rows)
        pending[t] = InFlight(route, request, recv, posted, dp.codec)
        with stats.timing("seconds_multiply"):
            return dp.ghost.matmul(ghost, out=out)

    def matmul_t(self, Y, stream, next_bin, pending: dict):
        op, dp, owner = self.op, self.product, self.owner
        y = check_tensor(op, Y, "matmul_t", op.n_local).detach().contiguous()
        op.stats.calls_matmul_t += 1
        stats = op.stats
        posted = None
        if not owner.drop and owner.backward == "delayed":
            t, b, slot = next_bin()
            route, name = self.routes[b], "-".join(map(str, slot))
            with stats.timing("seconds_multiply"):
                partial = dp.ghost.matmul(y, transposed=True)
            with stats.timing("seconds_exchange"):
                send = partial.index_select(0, self.ghost_rows[b])
            host, params = route.wire(dp.codec_backward, send, y.dtype,
                                      op.rounding_key(stream, 1), "dev_enc_partial" + name)
            request, recv, at = route.post(host, route.plan.n_send, False, params, name)
            posted = InFlight(route, request, recv, at, dp.codec_backward)
        with stats.timing("seconds_multiply"):
            out = dp.diag.matmul(y, transposed=True)
        if posted is not None:
            earlier = pending.pop(t - owner.staleness, None)
            if earlier is not None:
                back = earlier.finish(y.dtype, y.shape[1])
                with stats.timing("seconds_exchange"):
                    out.index_add_(0, self.send_idx[b], back)
            pending[t] = posted
        return out
