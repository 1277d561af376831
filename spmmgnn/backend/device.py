"""Where a grid's numbers live: None (numpy arrays, numba kernels on the CPU) or a torch
device (``"cpu"``, ``"cuda"``, ``"cuda:k"``) whose tensors the operators take and return.

``resolve_device`` turns the grid's ``device=`` into a ``torch.device`` once, collectively:
``"cuda"`` gives each rank GPU ``local_rank mod device_count`` (its rank on its node, so the
ranks of a node spread over its GPUs; ``CUDA_VISIBLE_DEVICES`` is respected because torch
counts only the visible ones). ``device_error`` is the one rule for a caller's data: on a
grid without a device only numpy arrays and CPU tensors; on a grid with one, only tensors
on that device. Data is never moved silently between devices (the old behaviour: a CUDA
tensor came back as a CPU tensor). ``to_host`` / ``to_device`` are the staged copies of the
device path, counted as the ``device_host`` tier of the statistics.

torch is imported only when a device is asked for (``import spmmgnn`` stays torch-free).
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from ..runtime.errors import agree
from ..runtime.stats import CommStats
from ..runtime.wire import allgather_json
from .convert import is_torch

KINDS = ("cpu", "cuda")


def _parse(spec) -> tuple[str | None, int | None, str | None]:
    """(kind, index or None, error) of a ``device=`` value."""
    if spec is None:
        return None, None, None
    text = str(spec).strip().lower()
    kind, _, index = text.partition(":")
    if kind not in KINDS or (index and (kind != "cuda" or not index.isdigit())):
        return None, None, (f"device must be None, 'cpu', 'cuda' or 'cuda:k', got {spec!r}")
    return kind, int(index) if index else None, None


def device_spec_error(spec) -> str | None:
    """What is wrong with a ``device=`` value (None: nothing; None itself is the host)."""
    return _parse(spec)[2]


def device_mismatch(spec, device) -> str | None:
    """Why a run that names device ``spec`` cannot use a grid on ``device`` (None: it can,
    or it names none)."""
    kind = _parse(spec)[0]
    if kind is None or (device is not None and kind == device.type):
        return None
    return (f"TrainConfig(device={spec!r}) but the operator's grid has device="
            f"{describe(device)}: build the grid with ProcessGrid(..., device={spec!r}) "
            "(spmmgnn train --device does)")


def device_kind(spec) -> str | None:
    """The kind a ``device=`` value asks for (``cpu``, ``cuda``; None: no device), or the
    value itself when it is not one: what the ranks of a grid agree on (``ProcessGrid``;
    the index of ``cuda:k`` may differ per rank)."""
    kind, _, error = _parse(spec)
    return str(spec) if error else kind


def resolve_device(spec, comm: MPI.Comm, node_comm: MPI.Comm):
    """Collective over ``comm``: the ``torch.device`` of this rank (None: no device, the
    numpy/numba path). Every rank asks for the same kind (``ProcessGrid`` agreed on
    ``device_kind``); a CUDA device that is not there is one error on every rank."""
    kind, index, error = _parse(spec)
    device = None
    if error is None and kind is not None:
        import torch

        if kind == "cpu":
            device = torch.device("cpu")
        else:
            count = torch.cuda.device_count() if torch.cuda.is_available() else 0
            if count == 0:
                error = ("device='cuda': no CUDA device is visible to this rank (torch "
                         f"{torch.__version__}; check CUDA_VISIBLE_DEVICES and that torch was "
                         "built with CUDA), or use device='cpu' or None")
            elif index is not None and index >= count:
                error = f"device='cuda:{index}': this rank sees {count} CUDA device(s)"
            else:
                k = node_comm.Get_rank() % count if index is None else index
                device = torch.device("cuda", k)
    agree(comm, error)
    return device


def describe(device) -> str:
    """``cuda:0`` / ``cpu`` / ``none`` (run headers)."""
    return "none" if device is None else str(device)


def device_error(x, device, what: str) -> str | None:
    """What is wrong with where ``x`` lives for a grid on ``device`` (None: nothing).

    ``device`` None: numpy arrays and CPU tensors only (a CUDA tensor is refused, not copied
    to the CPU and returned there). A torch device: tensors on exactly that device."""
    if not is_torch(x):
        if device is None:
            return None
        return (f"{what}: this grid keeps its data on {device} (ProcessGrid(device=...)), got "
                f"a {type(x).__name__}; pass a torch tensor on {device}, e.g. "
                f"torch.as_tensor(x, device='{device}')")
    if x.device.type == "meta":
        return (f"{what}: a meta tensor has a shape but no values; pass a tensor that holds "
                "data (e.g. created with device='cpu')")
    if device is None:
        if x.device.type == "cpu":
            return None
        return (f"{what}: got a tensor on {x.device}, but this grid has no device (device=None "
                "runs numpy/numba on the CPU) and data is never copied between devices "
                f"silently: build the grid with ProcessGrid(..., device='{x.device.type}'), or "
                "pass x.cpu()")
    if x.device == device:
        return None
    return (f"{what}: got a tensor on {x.device}, but this grid keeps its data on {device}; "
            f"data is never copied between devices silently: pass x.to('{device}')")


def to_host(t, stats: CommStats | None = None) -> np.ndarray:
    """A C-contiguous numpy copy (a view on the CPU) of tensor ``t``; with ``stats`` its
    bytes count as sent on the ``device_host`` tier (also on ``device='cpu'``, where no copy
    happens: the counters say what the same call moves across PCIe on a GPU)."""
    t = t.detach()
    if t.device.type != "cpu" and t.numel() == 0:  # nothing to copy: no device round trip
        return np.empty(tuple(t.shape), dtype=str(t.dtype).removeprefix("torch."))
    t = t.contiguous()
    if stats is not None:
        stats.bytes_device_to_host += t.numel() * t.element_size()
    return (t if t.device.type == "cpu" else t.cpu()).numpy()


def to_device(a: np.ndarray, device, stats: CommStats | None = None):
    """Tensor of numpy ``a`` on ``device`` (sharing its memory on the CPU); with ``stats``
    its bytes count as received on the ``device_host`` tier (as in ``to_host``)."""
    import torch

    t = torch.from_numpy(np.ascontiguousarray(a))
    if t.numel() == 0 and device is not None and device.type != "cpu":
        return torch.empty(t.shape, dtype=t.dtype, device=device)  # nothing to copy
    if stats is not None:
        stats.bytes_host_to_device += int(a.nbytes)
    return t if device is None or device.type == "cpu" else t.to(device)


def synchronizer(device):
    """A function that waits for ``device``'s queued work (a no-op off CUDA): timings of
    device work stop only once it has run."""
    if device is None or device.type != "cuda":
        return lambda: None
    import torch

    return lambda: torch.cuda.synchronize(device)


MEMORY_ENV = "SPMMGNN_DEVICE_MEMORY"  # pretend a device's free bytes (tests, CI)


def free_memory(device, comm: MPI.Comm) -> int | None:
    """Collective over ``comm``: the device memory this rank may use (None: unknown, no
    check). ``SPMMGNN_DEVICE_MEMORY`` when set (any device, so CI tests a refusal on
    ``device="cpu"``; a value that is not a number of bytes raises ``SpmmgnnError``), else on
    CUDA the device's free memory shared by the ranks of this node on it, plus what this
    process holds there already (the operator's blocks and the data, counted in the need)."""
    from ..runtime.settings import env_setting

    key = [MPI.Get_processor_name(), device.type, device.index]  # (JSON: no pickle)
    sharing = sum(1 for k in allgather_json(comm, key) if k == key)  # on every rank, first
    value = env_setting(MEMORY_ENV)
    if value is not None:
        return int(value)
    if device.type != "cuda":
        return None
    import torch

    free, _ = torch.cuda.mem_get_info(device)
    return int(free) // max(1, sharing) + int(torch.cuda.memory_allocated(device))
