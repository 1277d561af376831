"""GNN building blocks on the distributed SpMM.

Public API for research code: ``spmm(op, x, stream=None)`` (differentiable ``A @ x``),
layers ``GCNConv`` / ``SAGEConv`` whose ``forward`` takes ``(x, op)``, and the ready-made
``GNN`` the ``train`` command uses.
"""

from .dropout import dropout_mask, relu_dropout, vertex_dropout
from .layers import GCNConv, SAGEConv, aggregate_first
from .models import GNN, MODELS, build_model
from .spmm_function import SpMMFunction, spmm

__all__ = ["GCNConv", "GNN", "MODELS", "SAGEConv", "SpMMFunction", "aggregate_first",
           "build_model", "dropout_mask", "relu_dropout", "vertex_dropout", "spmm"]
