"""The distributed SpMM as a differentiable torch operation.

``Z = Â H`` (rows of Â are targets): forward is ``op.matmul(H)``, backward is
``dL/dH = Âᵀ dL/dZ = op.matmul_t(G)`` -- the third equation of ICPP'24 §2.1. Every rank holds
its block row of H and of Z; the operation is collective, so every rank must call it the same
number of times in the same order (the layers and the trainer guarantee that).
"""

from __future__ import annotations

import numpy as np
import torch

from ..dist import DistSpMM


class GraphOperator:
    """A (normalized) adjacency spread over the process grid, as the layers see it.

    ``vertex_ids``: the source-graph id of each local row (keys the partition-invariant
    dropout). ``columns_forward``/``columns_backward`` count the dense columns multiplied in
    each direction (how the layers' choice of multiplication order shows up).
    """

    def __init__(self, op: DistSpMM, vertex_ids: np.ndarray):
        self.op = op
        self.grid = op.grid
        self.vertex_ids = np.ascontiguousarray(vertex_ids, dtype=np.int64)
        self.n_local = op.n_local
        self.columns_forward = 0
        self.columns_backward = 0

    def aggregate(self, x: torch.Tensor) -> torch.Tensor:
        """Rows of ``Â @ x`` for this rank (differentiable, collective)."""
        return SpMMFunction.apply(x, self)


class SpMMFunction(torch.autograd.Function):
    """``Â X`` with ``Âᵀ G`` as backward; the backward is skipped when X needs no gradient."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, graph: GraphOperator) -> torch.Tensor:
        ctx.graph = graph
        graph.columns_forward += x.shape[1]
        return graph.op.matmul(x.detach().contiguous())

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        if not ctx.needs_input_grad[0]:
            return None, None
        graph = ctx.graph
        graph.columns_backward += grad.shape[1]
        return graph.op.matmul_t(grad.contiguous()), None
