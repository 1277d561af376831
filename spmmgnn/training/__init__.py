"""Full-batch distributed GNN training: data placement, loop, metrics, checkpoints."""

from .checkpoint import load_checkpoint, read_checkpoint, save_checkpoint
from .data import LocalData, distribute_graph, load_h5_distributed
from .metrics import evaluate, masked_loss_sum
from .run import RunSpec, run_training
from .trainer import BREAKDOWN, TrainConfig, Trainer

__all__ = ["BREAKDOWN", "LocalData", "RunSpec", "TrainConfig", "Trainer", "distribute_graph",
           "evaluate", "load_checkpoint", "load_h5_distributed", "masked_loss_sum",
           "read_checkpoint", "run_training", "save_checkpoint"]
