"""How a parameter is laid out over the ranks, declared: ``distributed_rows`` and
``RowEmbedding`` (rows that live with their vertices), ``replicated`` (the same on every rank).

An embedding table whose rows live with their vertices (LightGCN's user and item vectors)
is not replicated: rank r holds the rows of its block row, and the gradient its backward
pass computed for them is already their whole gradient (``spmm_t`` brought every other
row's contribution). Summing or averaging it with the other block rows' gradients would mix
the gradients of different rows, so ``allreduce_gradients`` must know these parameters:
registered ones are left per row (on a 1.5D grid the c replicas of a block row computed the
same gradient; replica 0's is handed to the others so their copies stay bit-identical).
A weight built the same way on every rank is declared with ``replicated`` (spmmgnn's layers
declare theirs); ``allreduce_gradients`` refuses an undeclared parameter whose first
dimension is this rank's row count, since its values cannot tell such a table from a weight
(a zero-initialized table, or one drawn after the same seed, is equal on every rank).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..local.hashing import uniform_by_id
from ..runtime.errors import agree

ATTR = "spmmgnn_rows"  # the attribute a registered parameter carries (a RowLayout)
REPLICATED = "spmmgnn_replicated"  # the attribute a declared replicated parameter carries
SIDES = ("input", "output")


@dataclass(frozen=True)
class RowLayout:
    """Where a registered parameter's rows live: the operator's ``side`` ("output": the
    rows of ``A @ X``; "input": the rows of X) on ``grid``, ``rows`` of them on this rank."""

    grid: object
    side: str
    rows: int


def distributed_rows(param: torch.Tensor, op, side: str = "output") -> torch.Tensor:
    """Collective over ``op.grid``: register ``param`` (this rank's rows of a table laid out
    like the ``side`` rows of ``op``) as distributed by rows, so ``allreduce_gradients``
    leaves its gradient per row instead of summing it over the ranks. Returns ``param``.
    A first dimension other than this rank's row count of that side is one error on every
    rank, naming the count and ``op.row_ids(side)`` (the global ids of the rows to hold)."""
    error = None
    if side not in SIDES:
        error = f"distributed_rows: side must be 'input' or 'output', got {side!r}"
    elif not isinstance(param, torch.Tensor):
        error = f"distributed_rows: expected a torch tensor, got {type(param).__name__}"
    else:
        rows = op.n_local_in if side == "input" else op.n_local
        if param.ndim < 1 or param.shape[0] != rows:
            error = (f"distributed_rows: this rank holds {rows} rows of the {side} side, got "
                     f"a parameter of shape {tuple(param.shape)}; build it from the rows "
                     f"with global ids op.row_ids({side!r})")
    agree(op.grid.comm, error)
    setattr(param, ATTR, RowLayout(op.grid, side, int(param.shape[0])))
    return param


def row_layout(param: torch.Tensor) -> RowLayout | None:
    """The layout ``distributed_rows`` registered for ``param`` (None: not registered)."""
    return getattr(param, ATTR, None)


def replicated(*items):
    """Declare parameters replicated: the same shape and values on every rank, their
    gradient summed over the rows by ``allreduce_gradients``. Takes tensors, modules (all
    their parameters) or iterables of either; returns its argument (one) or arguments, so
    ``head = replicated(torch.nn.Linear(64, 4))`` reads as a declaration. Local: no
    communication (``allreduce_gradients`` checks that the ranks agree)."""
    for item in items:
        tensors = (item.parameters() if isinstance(item, torch.nn.Module) else
                   [item] if isinstance(item, torch.Tensor) else item)
        for t in tensors:
            if isinstance(t, torch.nn.Module):
                replicated(t)
            else:
                setattr(t, REPLICATED, True)
    return items[0] if len(items) == 1 else items


def is_replicated(param: torch.Tensor) -> bool:
    """Whether ``param`` was declared replicated (``replicated``)."""
    return getattr(param, REPLICATED, False) is True


class RowEmbedding(torch.nn.Module):
    """This rank's rows of an n x ``dim`` embedding table laid out like the ``side`` rows of
    ``op``, registered with ``distributed_rows``. Row i starts at uniform values in
    [-scale, scale) drawn from (``seed``, global id i, column): the same table on any number
    of ranks and grid. ``forward()`` returns the local rows (``weight``); ``ids`` holds
    their global ids (the caller's numbering)."""

    def __init__(self, op, dim: int, side: str = "output", scale: float = 0.1,
                 seed: int = 0, dtype: torch.dtype = torch.float32):
        super().__init__()
        ids = op.row_ids(side) if side in SIDES else np.zeros(0, dtype=np.int64)
        cols = np.arange(int(dim), dtype=np.int64)
        keys = ids.astype(np.int64)[:, None] * max(int(dim), 1) + cols[None, :]
        init = (2.0 * uniform_by_id(keys.reshape(-1), seed) - 1.0) * scale
        self.ids = ids
        self.weight = torch.nn.Parameter(
            torch.from_numpy(init.reshape(ids.size, int(dim))).to(dtype))
        distributed_rows(self.weight, op, side)

    def forward(self) -> torch.Tensor:
        return self.weight
