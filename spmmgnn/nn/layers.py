"""GCN and GraphSAGE-mean layers on a distributed operator: ``layer(x, op)``, like PyG's
``conv(x, edge_index)`` with the graph given as a ``DistSpMM``.

A layer multiplies by the (normalized) adjacency once. It chooses the order that moves fewer
dense columns through the SpMM, counting the backward too:

- ``(A H) W`` ships ``f_in`` columns forward, plus ``f_in`` backward if H needs a gradient;
- ``A (H W)`` ships ``f_out`` forward, plus ``f_out`` backward whenever W is trained.

So the first layer (H = the input features, no gradient) prefers ``(A X) W`` unless
``2 f_out < f_in``; a square hidden layer ships the same number of columns either way
(training or inference) and keeps ``(A H) W``. Both orders give the same values and gradients (up to
rounding).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..algorithms.base import DistSpMM
from .rows import replicated
from .spmm_function import spmm


def aggregate_first(f_in: int, f_out: int, input_needs_grad: bool, training: bool) -> bool:
    """True when ``(A H) W`` ships no more columns than ``A (H W)``."""
    cost_ah = f_in * (2 if input_needs_grad else 1)
    cost_hw = f_out * (2 if training else 1)
    return cost_ah <= cost_hw


def trained_widths(dims: list[int]) -> list[int]:
    """Columns of the SpMM each layer after the first runs in training (``dims``: the
    widths ``f_in, hidden, ..., classes``); the first layer's input is constant."""
    return [a if aggregate_first(a, b, True, True) else b
            for a, b in zip(dims[1:-1], dims[2:], strict=True)]


CHUNK_MIN = 32  # fewest columns per SpMM of a chunked constant aggregation


def aggregation_chunk(dims: list[int]) -> int:
    """Columns per SpMM of the cached first-layer aggregation ``Â X``: as wide as the
    widest training SpMM (at least ``CHUNK_MIN``), so its exchange buffers are no wider
    than training's; the whole width when that is narrower."""
    return min(dims[0], max([CHUNK_MIN, *trained_widths(dims)]))


def glorot_(w: torch.Tensor) -> torch.Tensor:
    bound = math.sqrt(6.0 / (w.shape[0] + w.shape[1]))
    with torch.no_grad():
        return w.uniform_(-bound, bound)


def aggregate_linear(h: torch.Tensor, op: DistSpMM, weight: torch.Tensor,
                     bias: torch.Tensor | None, aggregated: torch.Tensor | None = None,
                     stream: int | None = None) -> torch.Tensor:
    """``A h W + b`` in the order that ships fewer columns; ``aggregated`` is a precomputed
    ``A h`` (constant input), used when given. The products are the grid's backend's."""
    grad_on = torch.is_grad_enabled()
    be = op.grid.backend
    if aggregated is None and (op.stale_remote or aggregate_first(
            weight.shape[0], weight.shape[1], grad_on and h.requires_grad, grad_on)):
        aggregated = spmm(op, h, stream)
    if aggregated is not None:
        return be.linear(aggregated, weight, bias)
    z = spmm(op, be.linear(h, weight), stream)
    return z if bias is None else z + bias


class GCNConv(nn.Module):
    """``A H W + b``; with ``A = D^-1/2 (A + I) D^-1/2`` (build the operator with
    ``normalize="gcn"``) this is Kipf & Welling's layer and PyG's ``GCNConv``.

    ``forward(x, op, aggregated=None, stream=None)``: ``x`` this rank's rows, ``op`` the
    distributed operator, ``aggregated`` a precomputed ``A x`` (constant input), ``stream``
    keys a codec's rounding (see ``spmmgnn.nn.spmm``)."""

    def __init__(self, f_in: int, f_out: int, bias: bool = True):
        super().__init__()
        self.f_in, self.f_out = f_in, f_out
        self.weight = nn.Parameter(glorot_(torch.empty(f_in, f_out)))
        self.bias = nn.Parameter(torch.zeros(f_out)) if bias else None
        replicated(self)  # the same weights on every rank (allreduce_gradients sums them)

    def forward(self, x: torch.Tensor, op: DistSpMM, aggregated: torch.Tensor | None = None,
                stream: int | None = None, with_bias: bool = True) -> torch.Tensor:
        """``with_bias=False``: leave ``+ b`` to the caller (the model fuses it into the
        ReLU + dropout pass that follows)."""
        return aggregate_linear(x, op, self.weight, self.bias if with_bias else None,
                                aggregated, stream)


class SAGEConv(nn.Module):
    """GraphSAGE with mean aggregation: ``H W_self + (A H) W_neigh + b`` with ``A`` the
    row-stochastic ``D^-1 A`` (``normalize="mean"``). Same ``forward`` as ``GCNConv``."""

    def __init__(self, f_in: int, f_out: int, bias: bool = True):
        super().__init__()
        self.f_in, self.f_out = f_in, f_out
        self.weight_self = nn.Parameter(glorot_(torch.empty(f_in, f_out)))
        self.weight_neigh = nn.Parameter(glorot_(torch.empty(f_in, f_out)))
        self.bias = nn.Parameter(torch.zeros(f_out)) if bias else None
        replicated(self)

    def forward(self, x: torch.Tensor, op: DistSpMM, aggregated: torch.Tensor | None = None,
                stream: int | None = None) -> torch.Tensor:
        neigh = aggregate_linear(x, op, self.weight_neigh, self.bias, aggregated, stream)
        # one pass adds the neighbours' term
        return op.grid.backend.linear(x, self.weight_self, add=neigh)


LAYERS = {"gcn": GCNConv, "sage": SAGEConv}
NORMALIZATION = {"gcn": "gcn", "sage": "mean"}
