"""Full-batch distributed training: one forward/backward over the whole graph per epoch.

Weights are replicated; each rank computes the gradient of its rows' share of the global
loss ``sum_{v in train} CE(v) / |train|``, and one ``Allreduce`` over the column
communicator (the ranks holding distinct rows -- never over the replicas of a 1.5D grid,
which would multiply the gradient by c) sums them (``collectives.allreduce_rows``, the rule
``spmmgnn.nn.allreduce_gradients`` applies to user models too). Every rank then applies the
same Adam step, so the weights stay identical without being broadcast again.

Time breakdown of a training epoch (ICPP'24 Fig. 4, SuperGCN Fig. 9), per rank:
``spmm_local`` (local sparse multiplies), ``exchange`` (halo / block-row communication),
``allreduce`` (gradient + loss all-reduce, and the 1.5D partial-sum all-reduce), ``dense``
(forward and backward less the SpMMs inside them -- dense matmuls, LayerNorm, dropout, loss --
plus the optimizer step), ``other`` (the rest of the epoch: zeroing the gradients, the
finite checks, the gradient buffer). Evaluation passes are timed separately.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from mpi4py import MPI

from ..algorithms.delayed import BACKWARDS, DelayedRemote
from ..algorithms.plexus3d import Plexus3D
from ..backend.device import describe, synchronizer
from ..exchange.collectives import allreduce_rows
from ..local.hashing import uniform_by_id
from ..nn.grid_model import GRID_ALGORITHMS, GridForward
from ..nn.grid_model import block_place as grid_place
from ..nn.memory import ModelShape, block_problem, model_bytes, model_problem
from ..nn.models import build_model
from ..nn.plexus_model import PlexusGCN
from ..nn.plexus_model import block_place as plexus_place
from ..runtime import signals
from ..runtime.errors import SpmmgnnError, agree, collective_error
from ..runtime.machine import node_total, peak_rss_bytes, ranks_on_this_node
from ..runtime.threads import scope
from ..runtime.wire import allgather_json, gather_json
from . import on_device
from .checkpoint import (
    load_checkpoint,
    read_meta,
    restore,
    save_checkpoint,
    signature_diff,
    state_bytes,
)
from .data import SPLITS, LocalData
from .metrics import evaluate, masked_loss_sum_torch, reduce_evaluation, rows_loss_sum
from .optim import Adam
from .progress import Progress

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
        if self.device is not None and str(self.device).partition(":")[0] not in ("cpu",
                                                                                   "cuda"):
            problems.append(f"--device must be cpu, cuda or cuda:k, got {self.device!r}")
        if self.plexus_blocks < 0:
            problems.append("--plexus-blocks must be >= 0")
        if self.dtype not in DTYPES:
            problems.append(f"--dtype must be one of {sorted(DTYPES)}")
        return "; ".join(problems) or None


def _spmm_seconds(op) -> np.ndarray:
    s = op.stats
    return np.array([s.seconds_multiply, s.seconds_exchange, s.seconds_allreduce])


def _mean(values) -> float:
    values = list(values)
    return float(np.mean(values)) if values else 0.0


class Trainer:
    """Trains a GNN on ``data`` (this rank's rows) with ``config``; collective throughout."""

    def __init__(self, data: LocalData, config: TrainConfig):
        config.check(data.op.grid.comm)
        self.data = data
        self.config = config
        self.grid = data.op.grid
        self.comm = self.grid.comm
        self.reduce_comm = self.grid.across_block_rows
        self.dtype = DTYPES[config.dtype]
        op = data.op
        self.device = self.grid.device
        self._check_device()
        self.x = data.features.to(self.dtype)
        if op.symmetric is None:  # a lossy codec keeps its own backward direction
            lossy = getattr(op, "codec", None) or getattr(op, "codec_backward", None)
            op.symmetric = False if lossy else op.probe_symmetry()
        if self.device is None:  # the products run in the training dtype from here on
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
        self.model = build_model(
            config.model, data.num_features, config.hidden, data.num_classes, config.layers,
            config.dropout, config.input_dropout, config.layernorm, config.seed,
            config.cache_input_aggregation, self.dtype,
            label_classes=data.num_classes if self.label_input is not None else 0)
        if self.device is not None:
            self.model.to(self.device)
        if config.plexus_blocks:   # Plexus's layout: same parameters, products in 3D blocks
            self.model = PlexusGCN(self.model, op, data.vertex_ids, config.plexus_blocks)
        self.params = list(self.model.parameters())
        self._broadcast_parameters()
        self.forward = self.model   # or the same model on SUMMA's 2D/3D blocks
        if config.grid_layout:
            self.forward = GridForward(self.model, op, data.vertex_ids, self.delayed is not None,
                                       self.label_input is not None)
        # one flat buffer: every parameter's .grad is a view into it, plus slots for the local
        # loss sum and for "this rank's loss or gradient is not finite", so gradients, loss
        # and the health check travel in a single Allreduce
        sizes = [p.numel() for p in self.params]
        self.flat = torch.zeros(sum(sizes) + 2, dtype=self.dtype,
                                device=self.device or torch.device("cpu"))
        self._n_grad = sum(sizes)
        self._views = []
        offset = 0
        for p, size in zip(self.params, sizes, strict=True):
            view = self.flat[offset:offset + size].view_as(p)
            p.grad = view
            self._views.append(view)
            offset += size
        self.optimizer = Adam(self.params, lr=config.lr, weight_decay=config.weight_decay,
                              fused=self.device is None)  # a device: torch's tensor path
        self.history: list[dict] = []
        self.diverged_at: int | None = None
        self._min_loss, self._above = math.inf, 0
        self.start_epoch = 1
        self.best: dict = {}
        if config.resume:
            self._resume()
        elif config.checkpoint and not config.overwrite_checkpoint:
            self._check_overwrite()

    # ------------------------------------------------------------------ setup
    def _check_remote_share(self) -> None:
        """Warn (rank 0) when cd-r / 0c would make most of the aggregate stale or drop it."""
        share = self.delayed.remote_share()
        if share > STALE_REMOTE_SHARE and self.comm.Get_rank() == 0:
            mode = "--drop-remote" if self.config.drop_remote else (
                f"--staleness {self.config.staleness}")
            warnings.warn(
                f"{mode}: {share:.0%} of the non-zeros are remote on this partition, so that "
                "share of every aggregate is stale or missing; measured on such partitions "
                "(bench/results/delayed.md), cd-5 ended up to 2.5 points and 0c up to 4.3 "
                "points below exact, both within 0.2 on a min-cut one: partition with "
                "--partitioner metis-vol (or datasets --partitioner for HDF5 files)",
                StaleRemoteWarning, stacklevel=2)

    def _check_device(self) -> None:
        """Collective, before any set-up: ``config.device`` names the grid's device, and the
        options run on a device (``training.on_device.options_error``)."""
        want, op = self.config.device, self.data.op
        error = None
        if want is not None and (self.device is None
                                 or str(want).partition(":")[0] != self.device.type):
            error = (f"TrainConfig(device={want!r}) but the operator's grid has device="
                     f"{describe(self.device)}: build the grid with ProcessGrid(..., "
                     f"device={want!r}) (spmmgnn train --device does)")
        elif self.device is not None:
            c = self.config
            error = on_device.options_error(type(op), getattr(op, "exchange", "flat"),
                                            bool(c.staleness or c.drop_remote))
        agree(self.comm, error)

    def _model_shape(self) -> ModelShape:
        c, d = self.config, self.data
        return ModelShape(features=d.num_features, hidden=c.hidden, classes=d.num_classes,
                          layers=c.layers, itemsize=torch.empty(0, dtype=self.dtype).itemsize)

    def _check_model_memory(self) -> None:
        """Collective: one error on every rank, before the model is built, when its weights,
        Adam's moments, activations and gradients (``nn.memory``), summed over this node's
        ranks (in the row layout; a block layout's largest rank times its ranks), do not fit
        in the memory this node has (``--hidden 1000000000`` is not an OOM kill); on a
        device grid also when they and the operator's blocks do not fit the device's free
        memory (``training.on_device.memory_problem``)."""
        shape = self._model_shape()
        place = self._block_place()
        if place is None:  # the node's ranks together: their rows may differ a lot
            rows = self.data.op.n_local
            node_need, ranks = node_total(self.comm, model_bytes(shape, rows))
            problem = model_problem(shape, rows, ranks, node_need)
        else:
            problem = block_problem(shape, place, ranks_on_this_node(self.comm),
                                    self.config.cache_input_aggregation)
        agree(self.comm, problem and f"{problem}: lower --hidden or --layers, or use more nodes")
        if self.device is not None:
            agree(self.comm, on_device.memory_problem(self.data.op, shape, self.comm))

    def _block_place(self):
        """Where a block layout keeps this rank's activations (``nn.memory.BlockPlace``;
        collective for Plexus's tiles), or None: the row layout, or an operator the layout
        refuses later with its own message."""
        op, c = self.data.op, self.config
        if c.grid_layout and op.name in GRID_ALGORITHMS:
            return grid_place(op)
        if c.plexus_blocks and isinstance(op, Plexus3D):
            return plexus_place(op)
        return None

    def _place_data(self) -> None:
        """What an epoch reads, where it runs: the data's own tensors without a device;
        on a device grid copies there (features, labels, masks, vertex ids) and each split's
        row indices, computed once so that no step waits for the device to count them."""
        d, dev = self.data, self.device
        self.labels, self.masks, self.vertex_ids = d.labels, d.masks, d.vertex_ids
        if dev is None:
            self.loss_rows = torch.nonzero(self.loss_mask, as_tuple=True)[0]
            return
        self.x = self.x.to(dev)
        self.labels = d.labels.to(dev)
        self.masks = {s: m.to(dev) for s, m in d.masks.items()}
        self.vertex_ids = torch.from_numpy(np.ascontiguousarray(d.vertex_ids,
                                                                dtype=np.int64)).to(dev)
        self.loss_mask = self.loss_mask.to(dev)
        if self.label_input is not None:
            self.label_input = self.label_input.to(dev)
        self.rows = {s: torch.nonzero(self.masks[s], as_tuple=True)[0] for s in SPLITS}
        self.loss_rows = torch.nonzero(self.loss_mask, as_tuple=True)[0]

    def _label_propagation_split(self) -> None:
        """SuperGCN label propagation: a seeded fraction of the training vertices (chosen by
        vertex id, so the same on any P) shows its label as input; the loss uses the rest."""
        d, rate = self.data, self.config.label_propagation
        train = d.masks["train"]
        self.label_input, self.loss_mask, self.loss_count = None, train, d.counts["train"]
        if rate <= 0:
            return
        ids = d.vertex_ids
        shown = torch.from_numpy(uniform_by_id(ids, self.config.seed + 0x4C50) < rate) & train
        self.label_input = torch.where(shown, d.labels, torch.full_like(d.labels, -1))
        self.loss_mask = train & ~shown
        self.loss_count = int(self.reduce_comm.allreduce(int(self.loss_mask.sum()), op=MPI.SUM))
        agree(self.comm, None if self.loss_count > 0 else
              "--label-propagation left no training vertex for the loss; lower the rate")

    def signature(self) -> dict:
        """What must match for a checkpoint to be resumed by this run: the options that change
        the mathematics, and the data's sizes and fingerprint (``training.fingerprint``)."""
        c, d, op = self.config, self.data, self.data.op

        def codec(attr: str) -> str:
            found = getattr(op, attr, None)
            return "none" if found is None else found.name

        return dict(model=c.model, layers=c.layers, hidden=c.hidden, dropout=c.dropout,
                    input_dropout=c.input_dropout, layernorm=c.layernorm, lr=c.lr,
                    weight_decay=c.weight_decay, seed=c.seed, dtype=c.dtype, n=d.n, nnz=d.nnz,
                    label_propagation=c.label_propagation, drop_remote=c.drop_remote,
                    staleness=c.staleness, delayed_backward=c.delayed_backward,
                    codec=codec("codec"),
                    codec_backward=codec("codec_backward"),
                    num_features=d.num_features, num_classes=d.num_classes,
                    counts=dict(d.counts), data=dict(d.fingerprint))

    def _broadcast_parameters(self) -> None:
        """Same seed gives the same weights everywhere; broadcast anyway to be certain."""
        if self.comm.Get_size() == 1:
            return
        if self.device is not None:
            on_device.broadcast_parameters(self.comm, self.params, self.data.op.stats)
            return
        with torch.no_grad():
            for p in self.params:
                buf = p.detach().numpy()
                self.comm.Bcast(buf, root=0)

    def _resume(self) -> None:
        meta, arrays = load_checkpoint(self.config.checkpoint, self.comm,
                                       max_bytes=state_bytes(self.model))
        diff = signature_diff(meta["signature"], self.signature())
        agree(self.comm, None if not diff else
              f"checkpoint {self.config.checkpoint} is from a different run: "
              + "; ".join(diff))
        error = None
        try:  # every rank holds the same arrays: one message, not one per rank
            restore(self.model, self.optimizer, meta, arrays)
        except SpmmgnnError as exc:
            error = f"checkpoint {self.config.checkpoint}: {exc}"
        agree(self.comm, error)
        for p, view in zip(self.params, self._views, strict=True):
            p.grad = view
        self.history = list(meta["history"])
        self.start_epoch = int(meta["epoch"]) + 1
        self.best = meta.get("best", {}) or self._best_from_history()

    def _check_overwrite(self) -> None:
        """Collective: refuse to start over on the checkpoint of another run (another
        signature: options, sizes or data fingerprint), or on a file that is no checkpoint;
        a checkpoint of this same run is started over with a warning."""
        path, error, held = self.config.checkpoint, None, None
        if self.comm.Get_rank() == 0 and Path(path).is_file():  # a device holds no run
            try:
                meta = read_meta(path)
                diff = signature_diff(meta["signature"], self.signature())
                held = meta["epoch"]
                if diff:
                    error = (f"checkpoint {path} holds another run ({'; '.join(diff)}); "
                             "pass --overwrite-checkpoint to replace it, or choose another "
                             "--checkpoint")
            except SpmmgnnError as exc:
                error = (f"{exc}; it is not replaced: pass --overwrite-checkpoint to replace "
                         "it, or choose another --checkpoint")
        agree(self.comm, error)
        if held is not None:
            warnings.warn(f"checkpoint {path} holds {held} epoch(s) of this same run; starting "
                          "over replaces it (--resume continues it)", stacklevel=3)

    def _best_from_history(self) -> dict:
        rows = [r for r in self.history if "val_acc" in r]
        if not rows:
            return {}
        r = max(rows, key=lambda r: r["val_acc"])
        return dict(epoch=r["epoch"], val_acc=r["val_acc"], test_acc=r["test_acc"])

    # ------------------------------------------------------------------ one epoch
    def train_step(self, epoch: int) -> dict:
        """Forward, backward, gradient all-reduce, Adam step. Returns the row for history.

        On a device grid the loss and the health flag are written into the flat buffer on
        the device, and the buffer's one host copy for the all-reduce is the step's only
        read of the device (plus a wait before each timestamp on CUDA, for the breakdown).
        numba's, the BLAS's and torch's threads are the library's running threads for the
        whole step (``threads.scope``: fewer while other work keeps cores busy)."""
        with scope(blas=True, torch=True):
            return self._train_step(epoch)

    def _train_step(self, epoch: int) -> dict:
        d, op = self.data, self.data.op
        sync = synchronizer(self.device)
        t0 = time.perf_counter()
        s0 = _spmm_seconds(op)
        bytes0 = op.stats.bytes_sent
        self.model.train()
        self.flat.zero_()
        t_forward = time.perf_counter()
        logits = self.forward(self.x, op, step=epoch, vertex_ids=self.vertex_ids,
                            label_input=self.label_input, layer_ops=self.layer_ops)
        if self.device is None:
            loss_sum = rows_loss_sum(logits, d.labels, self.loss_rows)
        else:
            loss_sum = masked_loss_sum_torch(logits, self.labels, self.loss_rows)
        (loss_sum / self.loss_count).backward()
        sync()
        t_backward = time.perf_counter()
        self._ensure_grad_views()
        self.flat[-1] = loss_sum.detach()
        if self.device is None:
            local_ok = bool(torch.isfinite(self.flat[:self._n_grad + 1]).all())
            self.flat[-2] = 0.0 if local_ok else 1.0
            t_reduce = time.perf_counter()
            host = allreduce_rows(self.grid, self.flat.numpy())  # each row once, replicas too
        else:
            self.flat[-2] = (~torch.isfinite(self.flat[:self._n_grad + 1]).all()).to(
                self.dtype)
            t_reduce = time.perf_counter()
            host, flag = on_device.allreduce_staged(self.grid, self.flat, op.stats)
            local_ok = flag == 0
        t_reduced = time.perf_counter()
        if not bool(np.isfinite(host).all()) or float(host[-2]) > 0:
            self._diverged(epoch, local_ok)
        t_step = time.perf_counter()
        self.optimizer.step()
        sync()
        t_end = time.perf_counter()
        multiply, exchange, spmm_allreduce = _spmm_seconds(op) - s0
        # every SpMM runs inside forward/backward: what else runs there is the dense work
        dense = (t_backward - t_forward) - (multiply + exchange + spmm_allreduce)
        breakdown = dict(spmm_local=multiply, exchange=exchange,
                         allreduce=(t_reduced - t_reduce) + spmm_allreduce,
                         dense=max(0.0, dense) + (t_end - t_step))
        total = t_end - t0
        breakdown["other"] = max(0.0, total - sum(breakdown.values()))
        return dict(epoch=epoch, loss=float(host[-1]) / self.loss_count,
                    seconds=total, breakdown={k: float(v) for k, v in breakdown.items()},
                    bytes_sent=int(op.stats.bytes_sent - bytes0))

    def _diverged(self, epoch: int, local_ok: bool) -> None:
        """Every rank gets here together (the flat buffer is the same everywhere): stop with
        one line naming the epoch, the ranks whose rows gave a non-finite loss or gradient,
        and whether the parameters were finite before this step."""
        bad = [r for r, ok in enumerate(allgather_json(self.comm, bool(local_ok))) if not ok]
        finite = all(bool(torch.isfinite(p).all()) for p in self.params)
        loss = float(self.flat[-1]) / self.loss_count
        why = ("the parameters were already NaN or Inf (from the checkpoint, or the previous "
               "step overflowed)" if not finite else
               "the parameters were finite before this step: lower --lr, or check the data "
               "and --dtype")
        raise collective_error(
            f"training stopped at epoch {epoch}: the loss ({loss:g}) or its gradient is NaN or "
            f"Inf on rank(s) {', '.join(map(str, bad))} of {self.comm.Get_size()}; {why}")

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

    def _ensure_grad_views(self) -> None:
        """Autograd accumulates into existing .grad in place; if it ever replaced one,
        copy it back into the flat buffer."""
        for p, view in zip(self.params, self._views, strict=True):
            if p.grad is not view:
                view.copy_(p.grad)
                p.grad = view

    @torch.no_grad()
    def evaluate(self) -> dict:
        """Global loss/accuracy on train/val/test with dropout off."""
        d = self.data
        self.model.eval()
        logits = self.forward(self.x, d.op, vertex_ids=self.vertex_ids,
                            label_input=self.label_input)
        if self.device is None:
            return evaluate(logits, d.labels, d.masks, d.counts, self.reduce_comm)
        local = on_device.evaluation_sums(logits, self.labels, self.rows, SPLITS, d.op.stats)
        return reduce_evaluation(local, d.counts, self.reduce_comm)

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
            device=describe(self.device),
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
