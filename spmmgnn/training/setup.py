"""What a ``Trainer`` does before its first step: the checks said once on every rank
(the grid's device and transport, the model's memory on the node and on the device), the
data where the grid's backend keeps its tensors, the label-propagation split, the same
parameters on every rank, and a checkpoint resumed or protected."""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
from mpi4py import MPI

from ..algorithms.plexus3d import Plexus3D
from ..backend.device import device_mismatch
from ..local.hashing import uniform_by_id
from ..nn.grid_model import GRID_ALGORITHMS
from ..nn.grid_model import block_place as grid_place
from ..nn.memory import ModelShape, block_problem, model_bytes, model_problem
from ..nn.plexus_model import block_place as plexus_place
from ..runtime.errors import SpmmgnnError, agree
from ..runtime.machine import format_bytes, format_bytes_apart, node_total, ranks_on_this_node
from .checkpoint import load_checkpoint, read_meta, restore, signature_diff, state_bytes
from .config import STALE_REMOTE_SHARE, StaleRemoteWarning
from .device_peak import StepShape, device_need, fits_text


def device_memory_problem(op, step: StepShape, comm: MPI.Comm, split_rows: int,
                          total_rows: int, total_nnz: int,
                          symmetric: bool | None = None) -> str | None:
    """Collective: the one-line refusal when this rank's training does not fit the memory of
    its grid's device (``Backend.training_memory``; ``device_peak.device_need``: blocks,
    data, weights and Adam's state, the step's activations and transients), naming what
    would fit: more devices of this size, or a larger one (None: it fits, or no device, or
    the free memory is unknown). ``symmetric``: assume it (before the probe has said)."""
    be = op.grid.backend
    try:
        have = be.training_memory(comm)
    except SpmmgnnError as exc:
        return str(exc)
    if have is None:
        return None
    need = device_need(op, step, split_rows, be.device.type, symmetric)
    if need.total <= have:
        return None
    ranks = comm.Get_size()
    need_text, have_text = format_bytes_apart(need.total, have)
    return (f"training on {be.device} needs about {need_text} of device memory on rank "
            f"{comm.Get_rank()} of {ranks} (operator blocks and exchange buffers "
            f"{format_bytes(need.blocks)}, features and labels {format_bytes(need.data)}, "
            f"weights, gradients and Adam's state {format_bytes(need.model)}, the step's "
            f"activations at its peak ({need.where}) {format_bytes(need.step)}) and the "
            f"device has {have_text} for it: "
            + fits_text(need, step, total_rows, total_nnz, have, ranks, format_bytes)
            + "; or lower --hidden or --layers, or train without --device")


class Preparation:
    """The set-up steps of a ``Trainer`` (see the module docstring)."""

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

    def _check_grid(self) -> None:
        """Collective, before any set-up: ``config.device`` and ``config.transport`` name
        the grid's own (the grid is built with them: ``spmmgnn train --device/--transport``)."""
        c, grid = self.config, self.grid
        error = device_mismatch(c.device, grid.device)
        if error is None and c.transport not in ("auto", grid.transport.name):
            error = (f"TrainConfig(transport={c.transport!r}) but the operator's grid moves "
                     f"its rows with {grid.transport.name}: build the grid with "
                     f"ProcessGrid(..., transport={c.transport!r}) (spmmgnn train "
                     "--transport does)")
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
        memory (``device_memory_problem``)."""
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
        agree(self.comm, self._device_memory_problem())

    def _device_step(self) -> StepShape:
        """The training step ``training.device_peak`` models for this rank."""
        c, d, op = self.config, self.data, self.data.op
        loss = getattr(self, "loss_mask", d.masks["train"])
        impl = "none" if c.dropout <= 0 else self.backend.dropout_impl
        return StepShape(shape=self._model_shape(), rows=int(op.n_local),
                         loss_rows=int(loss.sum()), cached=c.cache_input_aggregation,
                         dropout=c.dropout, input_dropout=c.input_dropout,
                         layernorm=c.layernorm, impl=impl)

    def _device_memory_problem(self, symmetric: bool | None = None) -> str | None:
        """Collective: ``device_memory_problem`` of this rank's step (``symmetric``: assume
        it, before the probe has said)."""
        split_rows = sum(int(m.sum()) for m in self.data.masks.values())
        return device_memory_problem(self.data.op, self._device_step(), self.comm,
                                     split_rows, int(self.data.n), int(self.data.nnz),
                                     symmetric)

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
        """What an epoch reads, where the grid's backend keeps its tensors (the data's own
        tensors on the host; copies on a device), and the row indices of the loss and of
        each split, found once so that no step waits for a device to count them."""
        be, d = self.backend, self.data
        self.x = be.place(self.x)
        self.labels = be.place(d.labels)
        self.vertex_ids = be.vertex_ids(d.vertex_ids)
        self.loss_mask = be.place(self.loss_mask)
        if self.label_input is not None:
            self.label_input = be.place(self.label_input)
        self.loss_rows = torch.nonzero(self.loss_mask, as_tuple=True)[0]
        self.rows = self.split_rows()

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
        """Same seed gives the same weights everywhere; broadcast rank 0's anyway, through
        the grid's link (counted as ``device_host`` where MPI stages them)."""
        if self.comm.Get_size() == 1:
            return
        link, be = self.grid.link(self.comm), self.backend
        with torch.no_grad():
            for p in self.params:
                link.bcast(be.of_tensor(p), 0, self.data.op.stats, "parameters")

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
        self.buckets.attach()
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
