"""The gradient all-reduce of replicated weights: ``spmmgnn.nn.allreduce_gradients``.

Every rank holds the same weights and computes the gradient of its own rows' share of the
loss; the full gradient is the sum of the shares over the ranks holding distinct rows
(``grid.across_block_rows``), each row once. Summing over the whole world instead would count
each row c times on a 1.5D grid (c replicas of every block row). The rule is
``spmmgnn.exchange.collectives.allreduce_rows_linked`` (through the grid's transport, on its
backend's tensors), which the trainer uses too.

Parameters distributed by rows (``spmmgnn.nn.distributed_rows``, ``RowEmbedding``) are not
summed: their gradient is already per row. Anything else must be replicated, and a parameter
that is not (another shape, or other values, on some rank: an unregistered embedding table)
is one error on every rank naming the fix, instead of gradients of different rows averaged.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

import numpy as np
import torch
from mpi4py import MPI

from ..exchange.collectives import allreduce_rows_linked
from ..runtime.errors import agree, collective_error
from .rows import row_layout

REGISTER = ("a table whose rows live with their vertices must be registered: "
            "spmmgnn.nn.distributed_rows(param, op) or spmmgnn.nn.RowEmbedding(op, dim); "
            "a replicated weight must start from the same values on every rank "
            "(torch.manual_seed before building it)")


def _crc(data: bytes, start: int = 0) -> int:
    return zlib.crc32(data, start) & 0x7FFFFFFF


def _signature(p: torch.Tensor) -> tuple[int, int]:
    """(hash of shape and dtype, hash of the values) of one replicated parameter."""
    shape = _crc(repr((tuple(p.shape), str(p.dtype))).encode())
    raw = p.detach().cpu().contiguous().reshape(-1).view(torch.uint8)  # any dtype's bytes
    values = _crc(raw.numpy().data)
    return shape, values


def _spread(comm: MPI.Comm, values: np.ndarray) -> np.ndarray:
    """Collective: True where ``values`` (int64, the same length on every rank) differ."""
    probe = np.concatenate([values, -values]).astype(np.int64)
    if comm.Get_size() > 1:
        comm.Allreduce(MPI.IN_PLACE, probe, op=MPI.MAX)
    k = values.size
    return probe[:k] != -probe[k:]


def _check(grid, shared: list, rows: list, position: list[int]) -> None:
    """Collective: every rank passes the same replicated parameters (shapes, dtypes, values)
    and registered row parameters of the same widths on this grid; one small all-reduce,
    a second only to name the first parameter that differs (by its ``position`` in the
    caller's list)."""
    wrong_grid = [i for i, p in enumerate(rows) if row_layout(p).grid is not grid]
    error = None if not wrong_grid else (
        f"allreduce_gradients: row parameter #{wrong_grid[0]} was registered with another "
        "grid's operator; pass the operator (or grid) its rows are laid out on")
    sigs = [_signature(p) for p in shared]
    widths = _crc(repr([(tuple(p.shape[1:]), str(p.dtype)) for p in rows]).encode())
    head = np.array([len(shared), len(rows), widths,
                     _crc(repr([s for s, _ in sigs]).encode()),
                     _crc(repr([v for _, v in sigs]).encode())], dtype=np.int64)
    differ = _spread(grid.comm, head)
    if differ[:3].any():
        error = error or ("allreduce_gradients: the ranks pass different parameters (their "
                          "number, or the widths of the row parameters)")
    elif differ[3:].any():  # the same count everywhere: locate the first that differs
        each = _spread(grid.comm, np.array(sigs, dtype=np.int64).reshape(-1, 2).T.reshape(-1))
        k = len(shared)
        bad = np.flatnonzero(each[:k] | each[k:])
        i = int(bad[0])
        what = "another shape" if each[i] else "other values"
        raise collective_error(
            f"allreduce_gradients: parameter #{position[i]} (shape {tuple(shared[i].shape)} "
            f"here) has {what} on some rank, so it is not replicated and summing its "
            f"gradient would mix different rows; {REGISTER}")
    agree(grid.comm, error)


def _flat(params: list) -> torch.Tensor:
    return (torch.cat([p.grad.detach().reshape(-1).to(torch.float64) for p in params])
            if params else torch.zeros(0, dtype=torch.float64))


def _unflatten(params: list, flat: torch.Tensor) -> None:
    offset = 0
    with torch.no_grad():
        for p in params:
            n = p.numel()
            p.grad.copy_(flat[offset:offset + n].view_as(p.grad))
            offset += n


def allreduce_gradients(parameters: Iterable[torch.Tensor], op_or_grid) -> None:
    """Collective: sum the ``.grad`` of replicated ``parameters`` over the ranks holding
    distinct rows, in one all-reduce; afterwards every rank holds the same gradient (call it
    between ``loss.backward()`` and ``optimizer.step()``). ``op_or_grid``: the operator the
    loss came through (a ``DistSpMM``) or its ``ProcessGrid``. A parameter without a
    gradient gets zeros, so every rank reduces the same buffer.

    Parameters registered as distributed by rows (``distributed_rows``, ``RowEmbedding``)
    keep their per-row gradient (a 1.5D grid's replicas of a block row get replica 0's, the
    same numbers). Every other parameter is treated as replicated and must have the same
    shape, dtype and values on every rank: one that differs (an unregistered embedding
    table) is one ``SpmmgnnError`` on every rank naming the fix, never a silent average of
    different rows' gradients."""
    grid = getattr(op_or_grid, "grid", op_or_grid)
    params = list(parameters)
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    rows = [p for p in params if row_layout(p) is not None]
    position = [i for i, p in enumerate(params) if row_layout(p) is None]
    shared = [params[i] for i in position]
    _check(grid, shared, rows, position)
    be = grid.backend
    flat = be.place(_flat(shared))
    allreduce_rows_linked(grid, be.of_tensor(flat))
    _unflatten(shared, flat)
    if rows and grid.across_replicas.Get_size() > 1:
        local = be.place(_flat(rows))
        grid.link(grid.across_replicas).bcast(be.of_tensor(local), 0)
        _unflatten(rows, local)
