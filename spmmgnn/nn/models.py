"""Full-batch GNN models: a stack of GCN or GraphSAGE-mean layers.

Layer l: ``dropout -> conv -> [LayerNorm] -> ReLU`` (no norm/ReLU after the last layer, which
outputs class logits). Dropout before the first layer is ``input_dropout`` (0 by default);
dropout between layers is ``dropout``. Dropout masks are keyed by global vertex ids
(``nn.dropout``), so a run is the same computation on any number of ranks.

When the first layer sees constant input (no input dropout, no gradient w.r.t. the features)
the aggregation ``Â X`` is the same every epoch; with ``cache_input_aggregation`` it is
computed once and reused (SGC-style), removing the first layer's SpMMs from training.
"""

from __future__ import annotations

import torch
from torch import nn

from .dropout import vertex_dropout
from .layers import LAYERS, NORMALIZATION
from .spmm_function import GraphOperator

MODELS = tuple(LAYERS)


class GNN(nn.Module):
    """GCN or GraphSAGE-mean with ``num_layers`` layers; weights are replicated on all ranks."""

    def __init__(self, kind: str, f_in: int, hidden: int, num_classes: int, num_layers: int = 2,
                 dropout: float = 0.5, input_dropout: float = 0.0, layernorm: bool = False,
                 seed: int = 0, cache_input_aggregation: bool = True):
        super().__init__()
        if kind not in LAYERS:
            raise ValueError(f"unknown model {kind!r}; choose one of {MODELS}")
        if num_layers < 1:
            raise ValueError("a model needs at least one layer")
        self.kind = kind
        self.normalization = NORMALIZATION[kind]
        self.dropout = float(dropout)
        self.input_dropout = float(input_dropout)
        self.seed = int(seed)
        self.cache_input_aggregation = cache_input_aggregation
        dims = [f_in] + [hidden] * (num_layers - 1) + [num_classes]
        self.convs = nn.ModuleList(LAYERS[kind](a, b) for a, b in zip(dims[:-1], dims[1:],
                                                                      strict=True))
        self.norms = nn.ModuleList(nn.LayerNorm(d) for d in dims[1:-1]) if layernorm else None
        self._cache: tuple | None = None

    def _input_aggregation(self, x: torch.Tensor, graph: GraphOperator) -> torch.Tensor | None:
        if (not self.cache_input_aggregation or x.requires_grad
                or (self.training and self.input_dropout > 0)):
            return None
        key = (id(graph), id(x), x._version, x.dtype)
        if self._cache is None or self._cache[0] != key:
            with torch.no_grad():
                self._cache = (key, graph.aggregate(x))
        return self._cache[1]

    def forward(self, x: torch.Tensor, graph: GraphOperator, step: int = 0) -> torch.Tensor:
        """Logits for this rank's rows. ``step`` (the epoch) keys the dropout masks."""
        h = x
        last = len(self.convs) - 1
        for i, conv in enumerate(self.convs):
            p = self.input_dropout if i == 0 else self.dropout
            aggregated = self._input_aggregation(x, graph) if i == 0 else None
            if self.training and p > 0:
                h = vertex_dropout(h, graph.vertex_ids, p, self.seed, step, i)
            h = conv(h, graph, aggregated)
            if i < last:
                if self.norms is not None:
                    h = self.norms[i](h)
                h = torch.relu(h)
        return h


def build_model(kind: str, f_in: int, hidden: int, num_classes: int, num_layers: int = 2,
                dropout: float = 0.5, input_dropout: float = 0.0, layernorm: bool = False,
                seed: int = 0, cache_input_aggregation: bool = True,
                dtype: torch.dtype = torch.float32) -> GNN:
    """A model whose initial weights depend on ``seed`` only (identical on every rank)."""
    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        model = GNN(kind, f_in, hidden, num_classes, num_layers, dropout, input_dropout,
                    layernorm, seed, cache_input_aggregation)
    finally:
        torch.random.set_rng_state(state)
    return model.to(dtype)
