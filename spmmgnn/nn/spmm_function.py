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
from ..hashing import uniform_by_id


class GraphOperator:
    """A (normalized) adjacency spread over the process grid, as the layers see it.

    ``vertex_ids``: the source-graph id of each local row (keys the partition-invariant
    dropout). ``symmetric``: Âᵀ = Â, so the backward may use the (faster) forward kernel and
    the same halo direction (ICPP'24 §3: "for undirected graphs ... no communication is
    needed for transpose"); ``None`` detects it with one probe (collective).
    ``columns_forward``/``columns_backward`` count the dense columns multiplied in each
    direction (how the layers' choice of multiplication order shows up).
    """

    def __init__(self, op: DistSpMM, vertex_ids: np.ndarray, symmetric: bool | None = None):
        self.op = op
        self.grid = op.grid
        self.vertex_ids = np.ascontiguousarray(vertex_ids, dtype=np.int64)
        self.n_local = op.n_local
        if symmetric is None:  # a lossy codec must keep its own backward direction
            compressed = getattr(op, "codec", None) or getattr(op, "codec_backward", None)
            symmetric = False if compressed else self.probe_symmetry()
        self.symmetric = bool(symmetric)
        self.columns_forward = 0
        self.columns_backward = 0

    def probe_symmetry(self, seed: int = 12345) -> bool:
        """Collective: is Âᵀ = Â? Compares ``Â x`` with ``Âᵀ x`` for two random vectors
        (float64); for continuous random x a non-symmetric Â is caught with probability 1.
        Keyed by vertex id, so every rank (and replica) draws consistent values."""
        from mpi4py import MPI

        x = np.column_stack([uniform_by_id(self.vertex_ids, seed + k) - 0.5 for k in range(2)])
        ax = self.op.matmul(x)
        atx = self.op.matmul_t(x)
        local = np.array([np.abs(ax - atx).max(initial=0.0), np.abs(ax).max(initial=0.0)])
        worst = np.empty_like(local)
        self.grid.comm.Allreduce(local, worst, op=MPI.MAX)
        self.op.reset_stats()
        return bool(worst[0] <= 1e-10 * max(worst[1], 1e-300))

    def aggregate(self, x: torch.Tensor) -> torch.Tensor:
        """Rows of ``Â @ x`` for this rank (differentiable, collective)."""
        return SpMMFunction.apply(x, self)


class SpMMFunction(torch.autograd.Function):
    """``Â X`` with ``Âᵀ G`` as backward; the backward is skipped when X needs no gradient.

    For a symmetric Â the backward calls ``matmul`` (same product, the forward kernel)."""

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
        g = grad.contiguous()
        return (graph.op.matmul(g) if graph.symmetric else graph.op.matmul_t(g)), None
