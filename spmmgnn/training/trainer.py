"""Full-batch distributed training: one forward/backward over the whole graph per epoch,
written once against the grid's backend (``grid.backend``: numpy + numba on the host, or
torch on a device) and transport (``grid.link``: MPI, or torch.distributed).

``Trainer`` is the loop (this module: set-up order, ``fit``, checkpoints, the summary) built
from its parts: ``setup.Preparation`` (the checks and placements before the first step),
``step.TrainingStep`` (one step, the gradient sums posted during the backward) and
``evaluation.Evaluation`` (loss and accuracy per split). The options are ``TrainConfig``
(``config``).
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict

import numpy as np
import torch

from ..algorithms.delayed import DelayedRemote
from ..backend.device import describe
from ..nn.grid_model import GridForward
from ..nn.models import build_model
from ..nn.plexus_model import PlexusGCN
from ..runtime import signals
from ..runtime.agreement import agree_on
from ..runtime.errors import SpmmgnnError, agree
from ..runtime.machine import peak_rss_bytes
from ..runtime.wire import gather_json
from .checkpoint import save_checkpoint
from .config import (  # noqa: F401 (the names the trainer's users import from here)
    BREAKDOWN,
    DIVERGED_EPOCHS,
    DTYPES,
    MAX_LR,
    STALE_REMOTE_SHARE,
    DivergenceWarning,
    StaleRemoteWarning,
    TrainConfig,
)
from .data import LocalData
from .evaluation import Evaluation
from .optim import Adam
from .progress import Progress
from .setup import Preparation
from .step import GradientBuckets, TrainingStep


def _mean(values) -> float:
    values = list(values)
    return float(np.mean(values)) if values else 0.0


class Trainer(Preparation, TrainingStep, Evaluation):
    """Trains a GNN on ``data`` (this rank's rows) with ``config``; collective throughout."""

    def __init__(self, data: LocalData, config: TrainConfig):
        agree_on(data.op.grid.comm, {f"TrainConfig.{k}": v for k, v in asdict(config).items()},
                 "the training run")
        config.check(data.op.grid.comm)
        self.data = data
        self.config = config
        self.grid = data.op.grid
        self.backend = self.grid.backend
        self.comm = self.grid.comm
        self.reduce_comm = self.grid.across_block_rows
        self.dtype = DTYPES[config.dtype]
        op = data.op
        self.device = self.grid.device
        self._check_grid()
        self.x = data.features.to(self.dtype)
        if op.symmetric is None:  # before the probe builds blocks on a device: refuse what
            # cannot fit even with a symmetric A (one CSR per block)
            agree(self.comm, self._device_memory_problem(symmetric=True))
        if op.symmetric is None:  # a lossy codec keeps its own backward direction
            lossy = getattr(op, "codec", None) or getattr(op, "codec_backward", None)
            op.symmetric = False if lossy else op.probe_symmetry()
        # the products run in the training dtype from here on
        op.keep_values(torch.empty(0, dtype=self.dtype).numpy().dtype)
        op.release_exchange_buffers()  # (every rank here: the probe is collective)
        self._label_propagation_split()
        self.delayed, self.layer_ops = None, None
        if config.staleness or config.drop_remote:
            agree(self.comm, None if op.delayed_remote else
                  f"--staleness and --drop-remote need --algorithm sparse1d, got {op.name}")
            self.delayed = DelayedRemote(op, config.staleness, config.drop_remote,
                                         config.delayed_backward, config.seed)
            self.layer_ops = self.delayed.views(config.layers)
            self._check_remote_share()
        self._check_model_memory()
        self._place_data()
        self.model = self.backend.place(build_model(
            config.model, data.num_features, config.hidden, data.num_classes, config.layers,
            config.dropout, config.input_dropout, config.layernorm, config.seed,
            config.cache_input_aggregation, self.dtype,
            label_classes=data.num_classes if self.label_input is not None else 0))
        if config.plexus_blocks:   # Plexus's layout: same parameters, products in 3D blocks
            self.model = PlexusGCN(self.model, op, data.vertex_ids, config.plexus_blocks)
        self.params = list(self.model.parameters())
        self._broadcast_parameters()
        self.forward = self.model   # or the same model on SUMMA's 2D/3D blocks
        if config.grid_layout:
            self.forward = GridForward(self.model, op, data.vertex_ids, self.delayed is not None,
                                       self.label_input is not None)
        self.buckets = GradientBuckets(self.params, self.grid, self.backend, self.dtype)
        self.flat = self.buckets.flat
        self.optimizer = Adam(self.params, lr=config.lr, weight_decay=config.weight_decay,
                              backend=self.backend)
        self.history: list[dict] = []
        self.diverged_at: int | None = None
        self._min_loss, self._above = math.inf, 0
        self.start_epoch = 1
        self.best: dict = {}
        if config.resume:
            self._resume()
        elif config.checkpoint and not config.overwrite_checkpoint:
            self._check_overwrite()

    def _watch_loss(self, row: dict) -> None:
        """One warning (rank 0) when the training loss has stayed above twice its minimum for
        ``DIVERGED_EPOCHS`` epochs: the run's last numbers come from a diverged model."""
        loss = row["loss"]
        self._min_loss = min(self._min_loss, loss)
        self._above = self._above + 1 if loss > 2 * self._min_loss else 0
        if self._above == DIVERGED_EPOCHS and self.diverged_at is None:
            self.diverged_at = row["epoch"] - DIVERGED_EPOCHS + 1
            if self.comm.Get_rank() == 0:
                warnings.warn(
                    f"the training loss has been above twice its minimum ({self._min_loss:.4g})"
                    f" since epoch {self.diverged_at}: the run diverged; its final accuracy "
                    "is that of a diverged model", DivergenceWarning, stacklevel=2)

    # ------------------------------------------------------------------ the loop
    def fit(self, on_epoch_end: Callable[[int, dict, Trainer], None] | None = None,
            keep_results: bool = False) -> dict:
        """Train (collective); returns the summary. ``keep_results``: if the final
        checkpoint cannot be written, return the summary anyway with the error line in
        ``self.save_error`` (the caller saves the results, then reports it) instead of
        raising it."""
        c = self.config
        rank0 = self.comm.Get_rank() == 0
        progress = Progress(c.epochs, enabled=c.progress and rank0, start=self.start_epoch - 1)
        t_start = time.perf_counter()
        try:
            for epoch in range(self.start_epoch, c.epochs + 1):
                t_epoch = time.perf_counter()
                row = self.train_step(epoch)
                if c.eval_every and (epoch % c.eval_every == 0 or epoch == c.epochs):
                    te = time.perf_counter()
                    row.update(self.evaluate())
                    row["eval_seconds"] = time.perf_counter() - te
                    if not self.best or row["val_acc"] > self.best["val_acc"]:
                        self.best = dict(epoch=epoch, val_acc=row["val_acc"],
                                         test_acc=row["test_acc"])
                self.history.append(row)
                self._watch_loss(row)
                progress.update(epoch, row, self.best)
                if c.checkpoint_every and epoch % c.checkpoint_every == 0:
                    self.save(epoch)
                if on_epoch_end is not None:
                    on_epoch_end(epoch, row, self)
                row["wall_seconds"] = time.perf_counter() - t_epoch
                signals.check()  # a signal swallowed by a callback (numba's cache) ends here
        finally:
            progress.close()
        if self.delayed is not None:
            self.delayed.close()
        wall = time.perf_counter() - t_start
        self.save_error = None
        if c.checkpoint and self.history:
            try:
                self.save(self.history[-1]["epoch"])
            except SpmmgnnError as exc:  # collective (save agrees)
                if not keep_results:
                    raise
                self.save_error = str(exc)
        return self.summary(wall)

    def save(self, epoch: int) -> None:
        """Collective: rank 0 writes the checkpoint; a failure is raised on every rank."""
        error = None
        if self.comm.Get_rank() == 0:
            try:
                save_checkpoint(self.config.checkpoint, self.model, self.optimizer, epoch,
                                self.history, self.signature())
            except SpmmgnnError as exc:
                error = str(exc)
        agree(self.comm, error)

    def summary(self, wall: float) -> dict:
        """Run summary (same on all ranks except ``ranks``, gathered on rank 0 only)."""
        op = self.data.op
        ran = [r for r in self.history if r["epoch"] >= self.start_epoch]
        steady = ran[1:] if len(ran) > 1 else ran  # epoch 1 includes JIT compilation
        mine = {k: float(sum(r["breakdown"][k] for r in steady) / max(1, len(steady)))
                for k in BREAKDOWN}
        stats = op.comm_stats()
        per_rank = dict(rank=self.grid.rank, block_row=self.grid.block_row, rows=op.n_local,
                        breakdown=mine, bytes_sent=stats["bytes_sent"],
                        bytes_received=stats["bytes_received"], kernels=stats["kernels"],
                        allreduce_bytes=stats["allreduce_bytes"],
                        bytes_sent_by_tier=stats["bytes_sent_by_tier"],
                        bytes_shared_read=stats.get("bytes_shared_read", 0),
                        bytes_received_by_tier=stats["bytes_received_by_tier"],
                        bytes_sent_by_phase=stats["bytes_sent_by_phase"],
                        train_bytes_per_epoch=float(np.mean([r["bytes_sent"] for r in ran]))
                        if ran else 0.0,
                        epoch_seconds=_mean(r["seconds"] for r in steady),
                        peak_rss_bytes=peak_rss_bytes())
        ranks = gather_json(self.comm, per_rank, root=0)
        last = self.history[-1] if self.history else {}
        return dict(
            config=asdict(self.config), dataset=self.data.name, n=self.data.n,
            nnz=self.data.nnz, num_features=self.data.num_features,
            num_classes=self.data.num_classes, counts=self.data.counts,
            P=self.grid.size, c=self.grid.replication, algorithm=op.name,
            device=describe(self.device), transport=self.grid.transport.describe(),
            exchange=stats["exchange"], ranks_per_node=self.grid.ranks_per_node,
            grid=None if self.grid.kind in ("1d", "1.5d") else list(self.grid.shape),
            data_info=self.data.info,
            epochs_run=len(ran), wall_seconds=wall,
            first_epoch_seconds=ran[0]["wall_seconds"] if ran else 0.0,
            steady_epoch_wall_seconds=_mean(r["wall_seconds"] for r in steady),
            eval_seconds=_mean(r.get("eval_seconds", 0.0) for r in steady),
            epoch_seconds=per_rank["epoch_seconds"], breakdown=mine,
            final={k: last[k] for k in ("epoch", "loss", "train_acc", "val_acc", "test_acc")
                   if k in last},
            diverged_at=self.diverged_at,
            peak_rss_bytes=max(r["peak_rss_bytes"] for r in ranks) if ranks else None,
            best=self.best, history=self.history, ranks=ranks)
