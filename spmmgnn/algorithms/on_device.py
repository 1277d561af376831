"""The device path of the 1D and 1.5D algorithms (sparse, oblivious, prepost1d): ``matmul`` /
``matmul_t`` on torch tensors that stay on the grid's device (``ProcessGrid(device=...)``).

The plan is the numpy one (the operator's ``GhostProduct`` and its halo plan, built as
usual); this module keeps device copies of what the products read: the owned and ghost
blocks as torch sparse CSR (and their transposes, built on the first ``matmul_t``), and the
halo plan's send rows as an index tensor. One call is the CPU path's, step by step, with
torch doing the local work on the device:

* ``A x``: gather the rows peers need (``index_select``), encode them when a codec is set,
  copy them to a host buffer, post the plan's ``Ialltoallv`` (counted by the same
  ``Route.post`` as the CPU path), multiply the owned block (``torch.sparse.mm``) while they
  travel, copy what arrived to the device, decode, add the ghost block's product
  (``torch.addmm``).
* ``A^T y``: the ghost block's transposed product first, to the host and posted backwards;
  the owned block's transposed product meanwhile; what arrived is added into the owners'
  rows (``index_add_``).
* the oblivious stage loop (``DeviceBroadcast``): each stage's block row of X is staged to
  the host by its owner, broadcast, and copied to the device on the others; the transposed
  partial sums are reduced on the host.
* 1.5D: the replicas' all-reduce runs on a host copy of the result.

Host <-> device copies are counted as the ``device_host`` tier (``spmmgnn.backend.device``). Every
codec encodes and decodes on the device with the CPU codec's wire bytes: the casts (float32,
float16, bfloat16) with torch's round-to-nearest-even, the integer codecs (int8, int4, int2)
with ``device_quantize`` (the same stochastic rounding, bit for bit); only packed rows leave
the device. The node-aware exchange (``exchange="node"`` / ``"auto"``) runs its plan's own
verbs on host copies: all of the rows it may send go to the host, the ghost rows come back.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from ..backend.device import device_error, to_device, to_host
from ..local import kernels
from ..runtime.errors import SpmmgnnError, agree, collective_error
from .base import CALLS, DistSpMM, device_families, local_input_error
from .block_broadcast import BlockBroadcast
from .device_products import DeviceBroadcast, DeviceProduct


def attach_device(op: DistSpMM) -> None:
    """Collective, at the end of a device-capable algorithm's construction: on a device
    grid, refuse what cannot run there (one error on every rank) and build the device
    copies of the local blocks and index lists."""
    if op.device is None:
        return
    error = construction_error(op)
    if error:
        raise collective_error(error)
    op.device_path = DevicePath(op)


def construction_error(op: DistSpMM) -> str | None:
    """Why ``op``'s options cannot run on its device grid (None: they can); the same verdict
    on every rank (the options were agreed)."""
    if not op.runs_on_device:
        return (f"{op.name} does not run on a device grid (device={op.grid.device}); the "
                f"algorithms that do: {', '.join(device_families())} (or build the grid with "
                "device=None for the numpy path)")
    return None


def has_nonfinite(x) -> bool:
    """Whether tensor ``x`` holds NaN or Inf: on the CPU the numpy path's one-pass kernel
    (``kernels.count_nonfinite``, no temporary), on a device ``torch_nonfinite``."""
    if x.device.type == "cpu":
        return bool(kernels.count_nonfinite(x.detach().contiguous().numpy()))
    return torch_nonfinite(x)


def torch_nonfinite(x) -> bool:
    """NaN or Inf in ``x`` by torch: the sum first (one reduction, no mask; NaN and Inf
    reach it), the exact elementwise test only when the sum is not finite, which finite
    values can also cause by overflowing."""
    import torch

    if bool(torch.isfinite(x.sum())):
        return False
    return not bool(torch.isfinite(x).all())


def check_tensor(op: DistSpMM, x, what: str, rows: int):
    """``check_local`` for a device grid, without copying ``x`` off the device: where it
    lives, its dtype, shape and finiteness here, then (unless ``validate=False``) one small
    all-reduce so a problem on one rank, or ranks in different calls, is an error on all."""

    error = local_input_error(x, what, op.device)
    if error is None:
        if x.dim() != 2 or x.shape[0] != rows:
            error = (f"{what}: expected this rank's {rows} rows as a 2-D array, got shape "
                     f"{tuple(x.shape)}")
        elif x.shape[1] < 1:
            error = f"{what}: the dense matrix needs at least one column"
        elif op.validate and has_nonfinite(x):
            error = f"{what}: input has NaN or Inf values"
    if not op.validate:
        if error:
            raise SpmmgnnError(error)
        return x
    comm = op.grid.comm
    if comm.Get_size() == 1:
        agree(comm, error)
        return x
    ok = error is None
    f = int(x.shape[1]) if ok else 0
    n = int(x.element_size()) if ok else 0
    c = CALLS.index(what)
    probe = np.array([not ok, f, -f, n, -n, c, -c], dtype=np.int64)
    seen = np.empty_like(probe)
    comm.Allreduce(probe, seen, op=MPI.MAX)
    if seen[5] != -seen[6]:
        raise collective_error(f"the ranks call different methods at the same time "
                               f"({CALLS[-seen[6]]} and {CALLS[seen[5]]}): every rank must "
                               "make the same collective call")
    if error is None and not seen[0] and (seen[1] != -seen[2] or seen[3] != -seen[4]):
        error = f"{what}: ranks disagree on the number of columns or the dtype"
    agree(comm, error)
    return x


class DevicePath:
    """An operator's calls on its device grid (built with the operator: ``attach_device``)."""

    def __init__(self, op: DistSpMM):
        self.op = op
        self.product = (DeviceBroadcast(op) if isinstance(getattr(op, "product", None),
                                                          BlockBroadcast)
                        else DeviceProduct(op))
        self.replication = getattr(op, "replication", None)

    def drop_transposes(self) -> None:
        """Free the transposed CSR copies of every block (a symmetric A needs none)."""
        for block in self.product.device_blocks():
            block.drop_transpose()

    def _allreduce(self, out):
        """The 1.5D replicas' sum of ``out``, through a host copy."""
        rep, stats = self.replication, self.op.stats
        if rep is None or self.op.grid.replication == 1:
            return out
        host = to_host(out, stats).copy()
        rep.allreduce(host, stats)
        return out.copy_(to_device(host, self.op.grid.device, stats))

    def call(self, X, stream: int | None, transposed: bool):
        """``matmul`` (``transposed`` False) or ``matmul_t`` of tensor ``X`` (2-D or 1-D)."""
        op = self.op
        what = "matmul_t" if transposed else "matmul"
        vector = getattr(X, "ndim", 0) == 1 and device_error(X, op.device, what) is None
        x = check_tensor(op, X.reshape(-1, 1) if vector else X, what,
                         op.n_local if transposed else op.n_local_in)
        x = x.detach().contiguous()
        if transposed:
            op.stats.calls_matmul_t += 1
        else:
            op.stats.calls_matmul += 1
        key = op.rounding_key(stream, int(transposed))  # the integer codecs' rounding
        out = self.product.matmul_t(x, key) if transposed else self.product.matmul(x, key)
        out = self._allreduce(out)
        return out[:, 0] if vector else out
