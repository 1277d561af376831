"""The gradient all-reduce of replicated weights: ``spmmgnn.nn.allreduce_gradients``.

Every rank holds the same weights and computes the gradient of its own rows' share of the
loss; the full gradient is the sum of the shares over the ranks holding distinct rows
(``grid.across_block_rows``), each row once. Summing over the whole world instead would count
each row c times on a 1.5D grid (c replicas of every block row). The rule is
``spmmgnn.exchange.collectives.allreduce_rows_linked`` (through the grid's transport, on its
backend's tensors), which the trainer uses too.

Parameters distributed by rows (``spmmgnn.nn.distributed_rows``, ``RowEmbedding``) are not
summed: their gradient is already per row. The others are replicated: declared so
(``spmmgnn.nn.replicated``, spmmgnn's layers), or undeclared and not shaped like this rank's
rows. Which is which is decided by declaration, never by comparing values: a per-vertex
table that holds the same values on every rank (zeros, or drawn after the same seed on
equal blocks) would pass a comparison and get other vertices' gradients summed into it.
An undeclared parameter whose first dimension is this rank's row count, a replicated one
whose shape or values differ between ranks, and a row parameter of another grid are each
one error on every rank naming the parameter and the fix.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

import numpy as np
import torch
from mpi4py import MPI

from ..exchange.collectives import allreduce_rows_linked
from ..runtime.errors import agree, collective_error
from .rows import is_replicated, row_layout

REGISTER = ("a table whose rows live with their vertices must be registered: "
            "spmmgnn.nn.distributed_rows(param, op) or spmmgnn.nn.RowEmbedding(op, dim); "
            "a replicated weight must start from the same values on every rank "
            "(torch.manual_seed before building it)")
DECLARE = ("if it holds one row per vertex, register it: "
           "spmmgnn.nn.distributed_rows(param, op) (side='input' for rows laid out like X) "
           "or build it as spmmgnn.nn.RowEmbedding(op, dim); if it is a weight that is the "
           "same on every rank, declare it: spmmgnn.nn.replicated(param)")


def _crc(data: bytes, start: int = 0) -> int:
    return zlib.crc32(data, start) & 0x7FFFFFFF


def _signature(p: torch.Tensor) -> tuple[int, int]:
    """(hash of shape and dtype, hash of the values) of one replicated parameter."""
    shape = _crc(repr((tuple(p.shape), str(p.dtype))).encode())
    raw = p.detach().cpu().contiguous().reshape(-1).view(torch.uint8)  # any dtype's bytes
    values = _crc(raw.numpy().data)
    return shape, values


def _range(comm: MPI.Comm, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Collective: the largest and smallest of ``values`` (int64, the same length on every
    rank) over the ranks, in one MAX all-reduce of (v, -v)."""
    probe = np.concatenate([values, -values]).astype(np.int64)
    if comm.Get_size() > 1:
        comm.Allreduce(MPI.IN_PLACE, probe, op=MPI.MAX)
    k = values.size
    return probe[:k], -probe[k:]


def _spread(comm: MPI.Comm, values: np.ndarray) -> np.ndarray:
    """Collective: True where ``values`` (int64, the same length on every rank) differ."""
    hi, lo = _range(comm, values)
    return hi != lo


def _named(parameters) -> list[tuple[str, torch.Tensor]]:
    """(label, tensor) of each parameter: ``#i`` (its position in the caller's list), and
    its name when the caller passed a module or ``named_parameters()``."""
    items = parameters.named_parameters() if isinstance(parameters, torch.nn.Module) \
        else parameters
    out = []
    for i, item in enumerate(items):
        if isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], torch.Tensor):
            out.append((f"#{i} ({item[0]!r})", item[1]))
        else:
            out.append((f"#{i}", item))
    return out


def _looks_like_rows(p: torch.Tensor, counts: set[tuple[int, int]]) -> int | None:
    """This rank's row count that ``p``'s first dimension equals, for an operator side whose
    rows are split over several block rows (None: none does)."""
    if p.ndim < 1:
        return None
    first = int(p.shape[0])
    hits = [local for local, whole in counts if first == local and 0 < local < whole]
    return hits[0] if hits else None


def _row_counts(op_or_grid, grid) -> set[tuple[int, int]]:
    """(rows on this rank, rows in all) of the sides of the operator passed, or of every
    operator built on the grid when a grid is passed."""
    if hasattr(op_or_grid, "n_local") and hasattr(op_or_grid, "n_local_in"):
        return {(op_or_grid.n_local, op_or_grid.m), (op_or_grid.n_local_in, op_or_grid.n)}
    return grid.row_counts


def _local_error(grid, counts: set[tuple[int, int]], named: list) -> str | None:
    """What this rank alone can tell is wrong: a row parameter of another grid, one declared
    both ways, or an undeclared parameter shaped like this rank's rows."""
    wrong_grid = [label for label, p in named if row_layout(p) is not None
                  and row_layout(p).grid is not grid]
    if wrong_grid:
        return (f"allreduce_gradients: row parameter {wrong_grid[0]} was registered with "
                "another grid's operator; pass the operator (or grid) its rows are laid "
                "out on")
    both = [label for label, p in named if row_layout(p) is not None and is_replicated(p)]
    if both:
        return (f"allreduce_gradients: parameter {both[0]} is declared both distributed by "
                "rows (distributed_rows, RowEmbedding) and replicated; declare it one way")
    for label, p in named:
        if row_layout(p) is None and not is_replicated(p):
            rows = _looks_like_rows(p, counts)
            if rows is not None:
                return (f"allreduce_gradients: parameter {label} (shape {tuple(p.shape)} "
                        f"here) is declared neither distributed by rows nor replicated, and "
                        f"its first dimension is this rank's {rows} rows of the operator: "
                        "summing its gradient over the ranks would add other "
                        f"vertices' gradients into its rows; {DECLARE}")
    return None


def _check(grid, counts: set[tuple[int, int]], named: list, shared: list,
           rows: list) -> None:
    """Collective: every rank passes the same number of replicated and row parameters (row
    widths alike), none is wrong on its own (``_local_error``), and the replicated ones
    have the same shapes, dtypes and values everywhere; one small all-reduce, more only on
    an error (to name the first parameter that differs, or the first rank's own error)."""
    error = _local_error(grid, counts, named)
    sigs = [_signature(p) for _, p in shared]
    widths = _crc(repr([(tuple(p.shape[1:]), str(p.dtype)) for _, p in rows]).encode())
    head = np.array([len(shared), len(rows), widths, error is not None,
                     _crc(repr([s for s, _ in sigs]).encode()),
                     _crc(repr([v for _, v in sigs]).encode())], dtype=np.int64)
    hi, lo = _range(grid.comm, head)
    if (hi[:3] != lo[:3]).any():
        raise collective_error("allreduce_gradients: the ranks pass different parameters "
                               "(their number, or the widths of the row parameters)")
    if hi[3]:  # some rank's own error: the first such rank's message on every rank
        agree(grid.comm, error)
    if (hi[4:] != lo[4:]).any():  # the same count everywhere: locate the first that differs
        each = _spread(grid.comm, np.array(sigs, dtype=np.int64).reshape(-1, 2).T.reshape(-1))
        k = len(shared)
        i = int(np.flatnonzero(each[:k] | each[k:])[0])
        label, p = shared[i]
        what = "another shape" if each[i] else "other values"
        raise collective_error(
            f"allreduce_gradients: parameter {label} (shape {tuple(p.shape)} here) has "
            f"{what} on some rank, so it is not replicated and summing its gradient would "
            f"mix different rows; {REGISTER}")


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


def allreduce_gradients(parameters: Iterable[torch.Tensor] | torch.nn.Module,
                        op_or_grid) -> None:
    """Collective: sum the ``.grad`` of replicated ``parameters`` over the ranks holding
    distinct rows, in one all-reduce; afterwards every rank holds the same gradient (call it
    between ``loss.backward()`` and ``optimizer.step()``). ``op_or_grid``: the operator the
    loss came through (a ``DistSpMM``) or its ``ProcessGrid``. A parameter without a
    gradient gets zeros, so every rank reduces the same buffer.

    ``parameters``: tensors, ``(name, tensor)`` pairs (``model.named_parameters()``) or a
    module; names, when given, appear in the errors.

    Each parameter is declared, not guessed from its values: registered as distributed by
    rows (``distributed_rows``, ``RowEmbedding``), it keeps its per-row gradient (a 1.5D
    grid's replicas of a block row get replica 0's, the same numbers); declared replicated
    (``replicated``; spmmgnn's layers declare their weights), its gradient is summed. An
    undeclared parameter is taken as replicated unless its first dimension is this rank's
    row count of either side of the operator (of any operator built on the grid when a grid
    is passed), split over several block rows: such a per-vertex table, whose values may be
    equal on every rank (zeros, the same seed), is refused. Every
    replicated parameter must have the same shape, dtype and values on every rank. Each
    refusal is one ``SpmmgnnError`` on every rank naming the parameter and the fix, never
    a silent sum of different rows' gradients."""
    grid = getattr(op_or_grid, "grid", op_or_grid)
    named = _named(parameters)
    for _, p in named:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    rows = [(label, p) for label, p in named if row_layout(p) is not None]
    shared = [(label, p) for label, p in named if row_layout(p) is None]
    _check(grid, _row_counts(op_or_grid, grid), named, shared, rows)
    rows = [p for _, p in rows]
    shared = [p for _, p in shared]
    be = grid.backend
    flat = be.place(_flat(shared))
    allreduce_rows_linked(grid, be.of_tensor(flat))
    _unflatten(shared, flat)
    if rows and grid.across_replicas.Get_size() > 1:
        local = be.place(_flat(rows))
        grid.link(grid.across_replicas).bcast(be.of_tensor(local), 0)
        _unflatten(rows, local)
