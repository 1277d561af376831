"""Training on a device grid (``ProcessGrid(device=...)``, ``spmmgnn train --device``): what
is refused before any set-up, the device-memory preflight, and the host-staged collectives.

Everything of an epoch stays on the device (features, labels, masks, parameters, dropout,
loss, Adam); three things cross to the host, each counted in the ``device_host`` tier of the
operator's statistics like the exchange's copies: the flat gradient buffer (gradients, loss,
health flag) once per step for its ``Allreduce``, the few evaluation sums once per
evaluation, and the parameters once at start for their broadcast. So a CUDA step reads the
device once (the reduced buffer), not once per operation.
"""

from __future__ import annotations

import numpy as np
import torch
from mpi4py import MPI

from ..backend.device import to_device, to_host
from ..exchange.collectives import allreduce_rows
from ..nn.memory import ModelShape, dense_bytes
from ..runtime.errors import SpmmgnnError
from ..runtime.machine import format_bytes, format_bytes_apart
from ..runtime.settings import env_setting
from ..runtime.wire import allgather_json

MEMORY_ENV = "SPMMGNN_DEVICE_MEMORY"  # pretend a device's free bytes (tests, CI)
INDEX_BYTES = 8  # torch sparse CSR keeps int64 column indices and row pointers


def options_error(algorithm, exchange: str = "flat", delayed: bool = False,
                  feature_parallel: bool = False) -> str | None:
    """Why a run with these options cannot train on a device grid (None: it can), said
    before any set-up. ``algorithm``: the algorithm's class (its ``runs_on_device``)."""
    from ..algorithms.base import device_families

    runs = ", ".join(device_families())
    if not algorithm.runs_on_device:
        return (f"--algorithm {algorithm.name} does not run on a device (--device); the "
                f"algorithms that do: {runs} (or drop --device for the numpy path)")
    if exchange != "flat":
        return (f"--exchange {exchange} does not run on a device (--device) yet; use "
                f"--exchange flat ({runs} run there)")
    if delayed:
        return ("--staleness and --drop-remote (the delayed views) do not run on a device "
                f"(--device) yet; the exact exchange of {runs} does")
    if feature_parallel:
        return f"feature-parallel training does not run on a device (--device); {runs} do"
    return None


def operator_bytes(op, itemsize: int) -> int:
    """Bytes the operator's blocks take on the device as torch CSR (values of ``itemsize``
    bytes, int64 column indices and row pointers), twice when ``A^T`` products need the
    transposes."""
    total = 0
    for m in op.local_matrices():
        total += m.nnz * (itemsize + INDEX_BYTES) + (m.shape[0] + 1) * INDEX_BYTES
    return total * (1 if op.symmetric else 2)


def free_bytes(device, sharing: int) -> int | None:
    """The device memory this rank may use (None: unknown, no check): ``SPMMGNN_DEVICE_MEMORY``
    when set (any device, so CI tests the refusal on ``device="cpu"``), else on CUDA the
    device's free memory shared by the ``sharing`` ranks on it, plus what this process holds
    there already (the operator's blocks and the data, counted in the need)."""
    value = env_setting(MEMORY_ENV)
    if value is not None:
        return int(value)
    if device.type != "cuda":
        return None
    free, _ = torch.cuda.mem_get_info(device)
    return int(free) // max(1, sharing) + int(torch.cuda.memory_allocated(device))


def memory_problem(op, shape: ModelShape, comm: MPI.Comm) -> str | None:
    """The one-line refusal when this rank's operator blocks, activations, gradients,
    parameters and Adam's state do not fit its device (None: they fit, or unknown)."""
    device = op.device
    key = [MPI.Get_processor_name(), device.type, device.index]  # (JSON: no pickle)
    sharing = sum(1 for k in allgather_json(comm, key) if k == key)  # on every rank, first
    try:
        have = free_bytes(device, sharing)
    except SpmmgnnError as exc:
        return str(exc)
    if have is None:
        return None
    dense = dense_bytes(shape, int(op.n_local))
    blocks = operator_bytes(op, shape.itemsize)
    model = dense["parameters"] + dense["optimizer"]
    data = dense["features"] + dense["activations"] + dense["gradients"]
    need = blocks + model + data
    if need <= have:
        return None
    need_text, have_text = format_bytes_apart(need, have)
    return (f"training on {device} needs about {need_text} of device memory on rank "
            f"{comm.Get_rank()} (operator blocks {format_bytes(blocks)}, features, activations "
            f"and gradients of {op.n_local} rows {format_bytes(data)}, parameters and Adam's "
            f"state {format_bytes(model)}) and the device has {have_text} for it: "
            "use more ranks or devices, lower --hidden or --layers, or train without --device")


def broadcast_parameters(comm: MPI.Comm, params, stats) -> None:
    """Rank 0's parameters on every rank, through host copies (counted as ``device_host``)."""
    with torch.no_grad():
        for p in params:
            host = np.ascontiguousarray(to_host(p, stats))
            comm.Bcast(host, root=0)
            p.copy_(to_device(host, p.device, stats))


def allreduce_staged(grid, flat: torch.Tensor, stats) -> tuple[np.ndarray, float]:
    """``collectives.allreduce_rows`` of the device buffer ``flat`` through one host copy each
    way. Returns the reduced host copy (``flat`` holds the same values afterwards) and this
    rank's own ``flat[-2]`` (the trainer's "not finite here" flag) read before the sum."""
    host = to_host(flat, stats)  # on the CPU a view of flat, else a fresh copy
    flag = float(host[-2])
    allreduce_rows(grid, host)
    flat.copy_(to_device(host, flat.device, stats))
    return host, flag


def evaluation_sums(logits: torch.Tensor, labels: torch.Tensor, idx: dict, splits,
                    stats) -> np.ndarray:
    """Per split, the loss sum (float64) and the number of correct predictions of this
    rank's rows, computed on the device and copied to the host in one piece."""
    from .metrics import masked_loss_sum_torch

    pred = logits.argmax(dim=1)
    z = logits.double()
    parts = []
    for s in splits:
        rows = idx[s]
        parts.append(masked_loss_sum_torch(z, labels, rows))
        parts.append((pred.index_select(0, rows) == labels.index_select(0, rows)).sum()
                     .to(torch.float64))
    return np.array(to_host(torch.stack(parts), stats), dtype=np.float64)
