"""How a device grid's exchanges reach MPI: staged through host buffers, or (CUDA-aware MPI)
straight from device memory.

``Staging`` is built once with an operator's device plan and owns its host buffers: on
CUDA they are pinned (page-locked, allocated once per name and grown only when a call needs
more rows) and the copies run on a CUDA stream of their own, after the work queued so far,
so the local product queued next runs while the rows are copied and travel; ``ready()``
waits for the copies before MPI reads the buffer. On ``device="cpu"`` the same calls use
ordinary buffers and no copy (a CPU tensor's memory is host memory), so CI runs the same
plan code.

``SPMMGNN_CUDA_AWARE_MPI`` = ``auto`` (the default) | ``0`` | ``1`` decides whether MPI gets
device tensors directly (mpi4py takes them through DLPack / ``__cuda_array_interface__``);
then nothing is staged and no ``device_host`` bytes are counted. ``auto`` asks the MPI
library (``MPIX_Query_cuda_support``, exported by Open MPI and by MPICH 4 and later) on a
CUDA grid, and is off where the library cannot tell or the grid is not on CUDA; ``1`` also
passes CPU tensors of a ``device="cpu"`` grid directly (how CI tests that path).
"""

from __future__ import annotations

import os

import numpy as np
from mpi4py import MPI

from .buffers import BufferPool
from .device import to_device, to_host
from .errors import agree
from .stats import CommStats

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
    """The host side of one device plan's exchanges (see the module docstring)."""

    def __init__(self, device, stats: CommStats, direct: bool):
        self.device, self.stats, self.direct = device, stats, direct
        self.cuda = device.type == "cuda"
        self.buffers = BufferPool()
        self.pinned: dict = {}
        self.stream = None
        if self.cuda:
            import torch

            self.stream = torch.cuda.Stream(device=device)

    @property
    def asynchronous(self) -> bool:
        """Whether copies run behind the host's back (CUDA): queue the local product before
        waiting for them."""
        return self.cuda and not self.direct

    def host_buffer(self, name: str, shape: tuple[int, int], dtype) -> np.ndarray:
        """A host buffer of ``shape`` kept under ``name``: pinned on CUDA, else pooled."""
        dtype = np.dtype(dtype)
        if not self.cuda:
            return self.buffers.get(name, shape, dtype)
        import torch

        need = int(np.prod(shape)) * dtype.itemsize
        held = self.pinned.get(name)
        if held is None or held.numel() < need:
            held = self.pinned[name] = torch.empty(max(need, 1), dtype=torch.uint8,
                                                   pin_memory=True)
        return held[:need].numpy().view(dtype).reshape(shape)

    def out(self, t, name: str):
        """What MPI sends for tensor ``t``: ``t`` itself (direct), its memory (CPU), or a
        pinned copy queued on the copy stream (CUDA; ``ready()`` before MPI reads it)."""
        if self.direct:
            return t.contiguous()
        if not self.cuda or t.numel() == 0:
            return to_host(t, self.stats)
        import torch

        t = t.contiguous()
        host = self.host_buffer(name, tuple(t.shape), str(t.dtype).removeprefix("torch."))
        self.stats.bytes_device_to_host += t.numel() * t.element_size()
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

    def recv(self, name: str, rows: int, like):
        """Where MPI receives ``rows`` rows shaped like ``like``'s: a device tensor when
        passing them directly (``like`` a tensor), else a host buffer."""
        if self.direct and not isinstance(like, np.ndarray):
            import torch

            return torch.empty((rows, like.shape[1]), dtype=like.dtype, device=like.device)
        dtype = like.dtype if isinstance(like, np.ndarray) else np.dtype(
            str(like.dtype).removeprefix("torch."))
        if self.cuda:  # the last copy out of this pinned buffer is done before MPI writes it
            self.stream.synchronize()
        return self.host_buffer(name, (rows, like.shape[1]), dtype)

    def arrived(self, recv):
        """What MPI received, as a tensor on the device: the tensor itself (direct), its
        memory (CPU), or a copy on the copy stream that the compute stream waits for."""
        if not isinstance(recv, np.ndarray):
            return recv
        if not self.cuda or recv.size == 0:
            return to_device(recv, self.device, self.stats)
        import torch

        self.stats.bytes_host_to_device += int(recv.nbytes)
        with torch.cuda.stream(self.stream):
            t = torch.from_numpy(recv).to(self.device, non_blocking=True)
        current = torch.cuda.current_stream(self.device)
        current.wait_stream(self.stream)
        t.record_stream(current)
        return t
