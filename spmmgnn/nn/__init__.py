"""GNN building blocks on the distributed SpMM.

Public API for research code: ``spmm(op, x, stream=None)`` (differentiable ``A @ x``),
``spmm_t(op, y)`` (differentiable ``A.T @ y``), ``allreduce_gradients(params, op)`` (the
gradient sum of replicated weights, each row once), ``distributed_rows(param, op)`` and
``RowEmbedding(op, dim)`` (tables whose rows live with their vertices), ``replicated(param)``
(weights the same on every rank; the layers declare theirs), layers ``GCNConv`` /
``SAGEConv`` whose ``forward`` takes ``(x, op)``, and the ready-made ``GNN`` the ``train``
command uses.
"""

from .dropout import dropout_mask, relu_dropout, vertex_dropout
from .gradients import allreduce_gradients
from .layers import GCNConv, SAGEConv, aggregate_first
from .models import GNN, MODELS, build_model
from .rows import RowEmbedding, distributed_rows, replicated
from .spmm_function import SpMMFunction, SpMMTFunction, spmm, spmm_t

__all__ = ["GCNConv", "GNN", "MODELS", "RowEmbedding", "SAGEConv", "SpMMFunction",
           "SpMMTFunction", "aggregate_first", "allreduce_gradients", "build_model",
           "distributed_rows", "dropout_mask", "relu_dropout", "replicated", "vertex_dropout",
           "spmm", "spmm_t"]
