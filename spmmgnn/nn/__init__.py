"""GNN layers on the distributed SpMM: autograd function, GCN / GraphSAGE-mean layers, models."""

from .dropout import dropout_mask, vertex_dropout
from .layers import GCNLayer, SAGELayer, aggregate_first
from .models import GNN, MODELS, build_model
from .spmm_function import GraphOperator, SpMMFunction

__all__ = ["GCNLayer", "GNN", "GraphOperator", "MODELS", "SAGELayer", "SpMMFunction",
           "aggregate_first", "build_model", "dropout_mask", "vertex_dropout"]
