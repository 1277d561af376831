"""Full-batch GNN models: a stack of GCN or GraphSAGE-mean layers.

Layer l: ``dropout -> conv -> [LayerNorm] -> ReLU`` (no norm/ReLU after the last layer, which
outputs class logits). Dropout before the first layer is ``input_dropout`` (0 by default);
dropout between layers is ``dropout``. Dropout masks are keyed by global vertex ids
(``nn.dropout``), so a run is the same computation on any number of ranks; a codec's rounding
is keyed by (seed, step, layer) through the SpMM's ``stream``, so a resumed run repeats the
uninterrupted one with any codec.

When the first layer sees constant input (no input dropout, no gradient w.r.t. the features)
the aggregation ``Â X`` is the same every epoch; with ``cache_input_aggregation`` it is
computed once and reused (SGC-style), removing the first layer's SpMMs from training. It runs
in column chunks no wider than training's SpMMs (``layers.aggregation_chunk``), so its
exchange buffers do not outgrow training's.

Label propagation (SuperGCN): with ``label_classes`` the model owns a learned embedding of the
labels; rows given a label in ``label_input`` (>= 0) get its embedding added to their input
features. The embedding starts at zero so the other weights are the same with or without it.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ..algorithms.base import DistSpMM
from ..local.hashing import mix64
from .layers import LAYERS, NORMALIZATION, GCNConv, aggregation_chunk
from .rows import replicated
from .spmm_function import spmm

MODELS = tuple(LAYERS)


class GNN(nn.Module):
    """GCN or GraphSAGE-mean with ``num_layers`` layers; weights are replicated on all ranks."""

    def __init__(self, kind: str, f_in: int, hidden: int, num_classes: int, num_layers: int = 2,
                 dropout: float = 0.5, input_dropout: float = 0.0, layernorm: bool = False,
                 seed: int = 0, cache_input_aggregation: bool = True, label_classes: int = 0):
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
        self.dims = dims
        self.convs = nn.ModuleList(LAYERS[kind](a, b) for a, b in zip(dims[:-1], dims[1:],
                                                                      strict=True))
        self.norms = nn.ModuleList(nn.LayerNorm(d) for d in dims[1:-1]) if layernorm else None
        self.label_embedding = None
        if label_classes:
            self.label_embedding = nn.Embedding(label_classes, f_in)
            nn.init.zeros_(self.label_embedding.weight)
        self._cache: tuple | None = None
        self._label_cache: tuple | None = None
        replicated(self)  # every weight is the same on every rank

    def _stream(self, step: int, layer: int) -> int:
        return mix64(self.seed, step, layer)

    def _input_aggregation(self, x: torch.Tensor, op: DistSpMM) -> torch.Tensor | None:
        if (not self.cache_input_aggregation or x.requires_grad
                or (self.training and self.input_dropout > 0)):
            return None
        key = (id(op), id(x), x._version, x.dtype)
        if self._cache is None or self._cache[0] != key:
            with torch.no_grad():
                self._cache = (key, self._aggregate_in_chunks(x, op, self._stream(-1, 0)))
        return self._cache[1]

    def _aggregate_in_chunks(self, x: torch.Tensor, op: DistSpMM, stream: int) -> torch.Tensor:
        """``Â X`` a block of ``aggregation_chunk`` columns at a time: the same numbers and
        bytes as one SpMM (each entry sums the same terms in the same order), with exchange
        buffers no wider than training's instead of f_in-wide ones kept for the run. With a
        codec the rows are encoded per SpMM, so it stays one SpMM (same rounding)."""
        f = x.shape[1]
        w = f if getattr(op, "codec", None) is not None else aggregation_chunk(self.dims)
        if w >= f:
            return spmm(op, x, stream)
        out = torch.empty((op.n_local, f), dtype=x.dtype, device=x.device)
        for a in range(0, f, w):
            out[:, a:a + w] = spmm(op, x[:, a:a + w], stream)
        return out

    def _label_aggregation(self, label_input: torch.Tensor, op: DistSpMM,
                           dtype: torch.dtype) -> torch.Tensor:
        """``A (M Y)``: the aggregated one-hot labels of the rows that show them (constant)."""
        key = (id(op), id(label_input), label_input._version, dtype)
        if self._label_cache is None or self._label_cache[0] != key:
            known = label_input >= 0
            onehot = torch.zeros(label_input.shape[0], self.label_embedding.num_embeddings,
                                 dtype=dtype, device=label_input.device)
            onehot[known, label_input[known]] = 1
            with torch.no_grad():
                self._label_cache = (key, spmm(op, onehot, self._stream(-1, 1)))
        return self._label_cache[1]

    def forward(self, x: torch.Tensor, op: DistSpMM, step: int = 0,
                vertex_ids: np.ndarray | None = None,
                label_input: torch.Tensor | None = None,
                layer_ops: list | None = None) -> torch.Tensor:
        """Logits for this rank's rows. ``step`` (the epoch) keys the dropout masks and the
        codec streams; ``vertex_ids`` (global id of each local row, default the operator's
        ``row_ids()``) key the dropout masks; ``label_input`` (class id, or -1) selects rows
        that get their label's embedding. ``layer_ops`` (one per layer) replaces ``op`` in
        the layers' aggregations, e.g. the delayed-remote views of ``algorithms.delayed``;
        the cached constant aggregations always use ``op``. Dropout and the dense products
        are the grid's backend's (``op.grid.backend``): the same masks on every backend.

        With labels shown, the first layer's input is ``X + M E[y]``; its aggregation is
        ``Â X + (Â M Y) E`` by linearity, so both constant parts stay cached."""
        be = op.grid.backend
        ids = be.vertex_ids(op.row_ids() if vertex_ids is None else vertex_ids)
        h = x
        first = self._input_aggregation(x, op)
        if self.label_embedding is not None and label_input is not None:
            known = (label_input >= 0).unsqueeze(1).to(x.dtype)
            h = x + self.label_embedding(label_input.clamp(min=0)) * known
            if first is not None:
                first = first + (self._label_aggregation(label_input, op, x.dtype)
                                 @ self.label_embedding.weight)
        if self.training and self.input_dropout > 0:
            h = be.vertex_dropout(h, ids, self.input_dropout, self.seed, step, 0)
        last = len(self.convs) - 1
        for i, conv in enumerate(self.convs):
            # a GCN layer's bias joins the ReLU + dropout pass that follows it
            fuse = (i < last and self.norms is None and self.training and self.dropout > 0
                    and isinstance(conv, GCNConv) and conv.bias is not None)
            args = (h, op if layer_ops is None else layer_ops[i], first if i == 0 else None,
                    self._stream(step, i))
            h = conv(*args, with_bias=False) if fuse else conv(*args)
            if i < last:
                if self.norms is not None:
                    h = self.norms[i](h)
                if self.training and self.dropout > 0:  # the dropout of layer i+1's input
                    h = be.relu_dropout(h, ids, self.dropout, self.seed, step, i + 1,
                                        bias=conv.bias if fuse else None)
                else:
                    h = torch.relu(h)
        return h


def build_model(kind: str, f_in: int, hidden: int, num_classes: int, num_layers: int = 2,
                dropout: float = 0.5, input_dropout: float = 0.0, layernorm: bool = False,
                seed: int = 0, cache_input_aggregation: bool = True,
                dtype: torch.dtype = torch.float32, label_classes: int = 0) -> GNN:
    """A model whose initial weights depend on ``seed`` only (identical on every rank)."""
    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        model = GNN(kind, f_in, hidden, num_classes, num_layers, dropout, input_dropout,
                    layernorm, seed, cache_input_aggregation, label_classes)
    finally:
        torch.random.set_rng_state(state)
    return model.to(dtype)
