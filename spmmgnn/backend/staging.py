"""How a device grid's exchanges reach MPI: staged through host buffers, or (CUDA-aware MPI)
straight from device memory.

``Staging`` is built once with a grid's torch backend and owns its host buffers: on
CUDA they are pinned (page-locked, allocated once per name and grown only when a call needs
more rows) and the copies run on a CUDA stream of their own, after the work queued so far,
so the local product queued next runs while the rows are copied and travel; ``ready()``
waits for the copies before MPI reads the buffer. On ``device="cpu"`` the same calls use
ordinary buffers and no copy (a CPU tensor's memory is host memory), so CI runs the same
plan code.

``SPMMGNN_CUDA_AWARE_MPI`` = ``auto`` (the default) | ``0`` | ``1`` decides whether MPI gets
device tensors directly (mpi4py takes them through DLPack / ``__cuda_array_interface__``);
then nothing is staged and no ``device_host`` bytes are counted, except for the reductions
(reduce, all-reduce, reduce-scatter: ``reduction=True``), which stay staged since not every
CUDA-aware MPI reduces device buffers. ``auto`` asks the MPI
library (``MPIX_Query_cuda_support``, exported by Open MPI and by MPICH 4 and later) on a
CUDA grid, and is off where the library cannot tell or the grid is not on CUDA; ``1`` also
passes CPU tensors of a ``device="cpu"`` grid directly (how CI tests that path).
"""

from __future__ import annotations

import os

import numpy as np
from mpi4py import MPI

from ..runtime.errors import agree

SETTING = "SPMMGNN_CUDA_AWARE_MPI"
CHOICES = ("auto", "0", "1")


def mpi_cuda_support() -> bool | None:
    """Whether the loaded MPI library says it takes CUDA buffers (its
    ``MPIX_Query_cuda_support``); None when no loaded library answers."""
    import ctypes

    try:
        with open("/proc/self/maps") as fh:
            paths = sorted({line.split()[-1] for line in fh if "/libmpi" in line})
    except OSError:
        return None
    for path in paths:
        try:
            query = getattr(ctypes.CDLL(path), "MPIX_Query_cuda_support", None)
        except OSError:
            continue
        if query is not None:
            query.restype = ctypes.c_int
            return bool(query())
    return None


def cuda_aware(comm: MPI.Comm, device) -> bool:
    """Collective: whether this grid passes device tensors to MPI (``SPMMGNN_CUDA_AWARE_MPI``;
    the same answer on every rank: ``auto`` is on only where every rank's library says so).
    A value other than auto, 0 or 1 is one error on every rank."""
    value = os.environ.get(SETTING, "auto").strip().lower() or "auto"
    error = None if value in CHOICES else (f"{SETTING}={value!r}: use auto, 0 or 1")
    agree(comm, error)
    if value == "auto":
        mine = device is not None and device.type == "cuda" and mpi_cuda_support() is True
    else:
        mine = value == "1" and device is not None
    return bool(comm.allreduce(int(mine), op=MPI.MIN))


class Staging:
    """The host side of a torch backend's exchanges over MPI (see the module docstring):
    pinned host buffers by name on CUDA, grown when a call needs more, and a copy stream."""

    def __init__(self, device, direct: bool):
        self.device, self.direct = device, direct
        self.cuda = device.type == "cuda"
        self.pinned: dict = {}
        self.stream = None
        if self.cuda:
            import torch

            self.stream = torch.cuda.Stream(device=device)

    @property
    def asynchronous(self) -> bool:
        """Whether copies run behind the host's back (CUDA, staged)."""
        return self.cuda and not self.direct

    def host_buffer(self, name: str, shape: tuple[int, ...], dtype) -> np.ndarray:
        """A pinned host buffer of ``shape`` kept under ``name`` (CUDA only)."""
        import torch

        dtype = np.dtype(dtype)
        need = int(np.prod(shape)) * dtype.itemsize
        held = self.pinned.get(name)
        if held is None or held.numel() < need:
            held = self.pinned[name] = torch.empty(max(need, 1), dtype=torch.uint8,
                                                   pin_memory=True)
        return held[:need].numpy().view(dtype).reshape(shape)

    def out(self, t, stats, name: str, reduction: bool = False):
        """What MPI sends for tensor ``t``: ``t`` itself (direct, not a ``reduction``), its
        memory (CPU), or a pinned copy queued on the copy stream (CUDA; ``ready()`` before
        MPI reads it)."""
        if self.direct and not reduction:
            return t.contiguous()
        t = t.detach().contiguous()
        if stats is not None:
            stats.bytes_device_to_host += t.numel() * t.element_size()
        if not self.cuda:
            return t.numpy()
        import torch

        host = self.host_buffer(name, tuple(t.shape), str(t.dtype).removeprefix("torch."))
        if t.numel():
            self.stream.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(self.stream):
                torch.from_numpy(host).copy_(t, non_blocking=True)
            t.record_stream(self.stream)  # not reused by the allocator while it is copied
        return host

    def ready(self, send) -> None:
        """Before MPI reads ``send``: the copies queued, or (direct on CUDA) the work that
        wrote the tensor, have finished."""
        if not self.cuda:
            return
        import torch

        if isinstance(send, torch.Tensor):
            torch.cuda.current_stream(self.device).synchronize()
        else:
            self.stream.synchronize()

    def recv(self, recv, name: str, reduction: bool = False):
        """Where MPI receives what lands in tensor ``recv``: ``recv`` itself (direct, not a
        ``reduction``), its memory (CPU), or a pinned host buffer (CUDA)."""
        if self.direct and not reduction:
            return recv
        if not self.cuda:
            return recv.numpy()
        self.stream.synchronize()  # the last copy out of this pinned buffer is done
        return self.host_buffer(name + "_recv", tuple(recv.shape),
                                str(recv.dtype).removeprefix("torch."))

    def landed(self, host, recv, stats, reduction: bool = False) -> None:
        """What MPI wrote into ``host`` (from ``recv``) is in tensor ``recv``: nothing to do
        (direct and not a ``reduction``, CPU) but count, or a copy on the copy stream the
        compute stream waits for."""
        if self.direct and not reduction:
            return
        if stats is not None:
            stats.bytes_host_to_device += recv.numel() * recv.element_size()
        if not self.cuda or recv.numel() == 0:
            return
        import torch

        with torch.cuda.stream(self.stream):
            recv.copy_(torch.from_numpy(host), non_blocking=True)
        current = torch.cuda.current_stream(self.device)
        current.wait_stream(self.stream)
        recv.record_stream(current)
