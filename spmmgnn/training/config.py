"""What a training run is asked to do: ``TrainConfig`` (the options that change the
mathematics, the run's length and its outputs), checked before any set-up, and the warnings
a run may give."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from mpi4py import MPI

from ..algorithms.delayed import BACKWARDS
from ..backend.device import device_spec_error
from ..exchange.transport import TRANSPORTS
from ..runtime.errors import SpmmgnnError, agree

BREAKDOWN = ("spmm_local", "exchange", "allreduce", "dense", "other")
DTYPES = {"float32": torch.float32, "float64": torch.float64}
MAX_LR = 1e30
DIVERGED_EPOCHS = 20  # epochs the loss must stay above 2x its minimum to be called diverged
# Above this share of remote non-zeros, cd-5 ended 0.7-2.5 points below exact in
# bench/results/delayed.md (50-75 % remote); at 3-6 % (metis-vol) it was within 0.2 point.
STALE_REMOTE_SHARE = 0.25


class DivergenceWarning(UserWarning):
    """The training loss rose far above its minimum and stayed there."""


class StaleRemoteWarning(UserWarning):
    """cd-r or 0c on a partition where much of every aggregate is remote."""


@dataclass
class TrainConfig:
    model: str = "gcn"
    layers: int = 2
    hidden: int = 64
    dropout: float = 0.5
    input_dropout: float = 0.0
    layernorm: bool = False
    lr: float = 0.01
    weight_decay: float = 5e-4
    epochs: int = 100
    seed: int = 0
    eval_every: int = 1
    checkpoint: str | None = None
    checkpoint_every: int = 0
    resume: bool = False
    overwrite_checkpoint: bool = False
    cache_input_aggregation: bool = True
    progress: bool = True
    dtype: str = "float32"
    label_propagation: float = 0.0
    staleness: int = 0
    drop_remote: bool = False
    delayed_backward: str = "local"
    grid_layout: bool = False   # oblivious2d/3d: activations stay in SUMMA's blocks (nn.grid_model)
    device: str | None = None  # None: the grid's (None: numpy/numba); else must be the grid's
    transport: str = "auto"    # "auto": the grid's; "mpi" or "torch": must be the grid's
    plexus_blocks: int = 0   # > 0: plexus3d trains in its blocks, this many row blocks

    def check(self, comm: MPI.Comm | None = None) -> None:
        """SpmmgnnError for bad settings; with ``comm``, collective (every rank raises)."""
        problem = self.problem()
        if comm is not None:
            agree(comm, problem)
        elif problem:
            raise SpmmgnnError(problem)

    def problem(self) -> str | None:
        """What is wrong with these settings (None: nothing)."""
        floats = dict(lr=self.lr, weight_decay=self.weight_decay, dropout=self.dropout,
                      input_dropout=self.input_dropout,
                      label_propagation=self.label_propagation)
        bad = [f"--{k.replace('_', '-')} {v}" for k, v in floats.items()
               if not math.isfinite(v)]
        if bad:
            return f"{', '.join(bad)}: must be a finite number"
        problems = []
        if self.layers < 1 or self.hidden < 1 or self.epochs < 0:
            problems.append("--layers and --hidden must be >= 1 and --epochs >= 0")
        if not (0 <= self.dropout < 1 and 0 <= self.input_dropout < 1):
            problems.append("dropout rates must lie in [0, 1)")
        if not (0 < self.lr <= MAX_LR and 0 <= self.weight_decay <= MAX_LR):
            problems.append(f"--lr must lie in (0, {MAX_LR:g}] and --weight-decay in [0, "
                            f"{MAX_LR:g}] (Adam's step must fit a float32)")
        if self.checkpoint_every < 0 or self.eval_every < 0:
            problems.append("--checkpoint-every and --eval-every must be >= 0")
        if (self.resume or self.checkpoint_every) and not self.checkpoint:
            problems.append("--resume and --checkpoint-every need --checkpoint PATH")
        if self.resume and self.overwrite_checkpoint:
            problems.append("--resume continues the checkpoint and --overwrite-checkpoint "
                            "replaces it: choose one")
        if not 0 <= self.label_propagation < 1:
            problems.append("--label-propagation must lie in [0, 1)")
        if self.staleness < 0 or (self.staleness and self.drop_remote):
            problems.append("--staleness must be >= 0 and cannot be combined with "
                            "--drop-remote")
        if self.delayed_backward not in BACKWARDS:
            problems.append(f"--delayed-backward must be one of {BACKWARDS}")
        if self.resume and self.staleness:
            problems.append("--resume with --staleness > 0 is not supported: the remote "
                            "aggregates in flight are not part of a checkpoint")
        if device_spec_error(self.device):
            problems.append(f"--device must be cpu, cuda or cuda:k, got {self.device!r}")
        if self.transport not in TRANSPORTS:
            problems.append(f"--transport must be one of {', '.join(TRANSPORTS)}, got "
                            f"{self.transport!r}")
        if self.plexus_blocks < 0:
            problems.append("--plexus-blocks must be >= 0")
        if self.dtype not in DTYPES:
            problems.append(f"--dtype must be one of {sorted(DTYPES)}")
        return "; ".join(problems) or None

