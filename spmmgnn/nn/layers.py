"""GCN and GraphSAGE-mean layers on a distributed adjacency.

A layer multiplies by the (normalized) adjacency once. It chooses the order that moves fewer
dense columns through the SpMM, counting the backward too:

- ``(Â H) W`` ships ``f_in`` columns forward, plus ``f_in`` backward if H needs a gradient;
- ``Â (H W)`` ships ``f_out`` forward, plus ``f_out`` backward whenever W is trained.

So the first layer (H = the input features, no gradient) prefers ``(Â X) W`` unless
``2 f_out < f_in``; a square hidden layer prefers ``Â (H W)`` only in inference. Both orders
give the same values and gradients (up to rounding).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .spmm_function import GraphOperator


def aggregate_first(f_in: int, f_out: int, input_needs_grad: bool, training: bool) -> bool:
    """True when ``(Â H) W`` ships no more columns than ``Â (H W)``."""
    cost_ah = f_in * (2 if input_needs_grad else 1)
    cost_hw = f_out * (2 if training else 1)
    return cost_ah <= cost_hw


def _linear(h: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    """``h @ w + b`` with the bias folded into the GEMM."""
    return h @ w if b is None else torch.addmm(b, h, w)


def glorot_(w: torch.Tensor) -> torch.Tensor:
    bound = math.sqrt(6.0 / (w.shape[0] + w.shape[1]))
    with torch.no_grad():
        return w.uniform_(-bound, bound)


def aggregate_linear(h: torch.Tensor, graph: GraphOperator, weight: torch.Tensor,
                     bias: torch.Tensor | None,
                     aggregated: torch.Tensor | None = None) -> torch.Tensor:
    """``Â h W + b`` in the order that ships fewer columns; ``aggregated`` is a precomputed
    ``Â h`` (constant input), used when given."""
    grad_on = torch.is_grad_enabled()
    if aggregated is None and aggregate_first(weight.shape[0], weight.shape[1],
                                              grad_on and h.requires_grad, grad_on):
        aggregated = graph.aggregate(h)
    if aggregated is not None:
        return _linear(aggregated, weight, bias)
    z = graph.aggregate(h @ weight)
    return z if bias is None else z + bias


class GCNLayer(nn.Module):
    """``Â H W + b`` with ``Â = D^-1/2 (A + I) D^-1/2`` (Kipf & Welling)."""

    def __init__(self, f_in: int, f_out: int, bias: bool = True):
        super().__init__()
        self.f_in, self.f_out = f_in, f_out
        self.weight = nn.Parameter(glorot_(torch.empty(f_in, f_out)))
        self.bias = nn.Parameter(torch.zeros(f_out)) if bias else None

    def forward(self, h: torch.Tensor, graph: GraphOperator,
                aggregated: torch.Tensor | None = None) -> torch.Tensor:
        """``aggregated``: a precomputed ``Â h`` (constant input), used when given."""
        return aggregate_linear(h, graph, self.weight, self.bias, aggregated)


class SAGELayer(nn.Module):
    """GraphSAGE with mean aggregation: ``H W_self + (D^-1 A H) W_neigh + b``."""

    def __init__(self, f_in: int, f_out: int, bias: bool = True):
        super().__init__()
        self.f_in, self.f_out = f_in, f_out
        self.weight_self = nn.Parameter(glorot_(torch.empty(f_in, f_out)))
        self.weight_neigh = nn.Parameter(glorot_(torch.empty(f_in, f_out)))
        self.bias = nn.Parameter(torch.zeros(f_out)) if bias else None

    def forward(self, h: torch.Tensor, graph: GraphOperator,
                aggregated: torch.Tensor | None = None) -> torch.Tensor:
        neigh = aggregate_linear(h, graph, self.weight_neigh, self.bias, aggregated)
        return torch.addmm(neigh, h, self.weight_self)  # one GEMM pass adds the self term


LAYERS = {"gcn": GCNLayer, "sage": SAGELayer}
NORMALIZATION = {"gcn": "gcn", "sage": "mean"}
