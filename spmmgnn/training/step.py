"""One training step: forward, backward, the gradient all-reduce, Adam.

Weights are replicated; each rank computes the gradient of its rows' share of the global
loss ``sum_{v in train} CE(v) / |train|``, and the sum over the ranks holding distinct rows
(never over the replicas of a 1.5D grid, which would multiply the gradient by c: replica 0's
sum goes to the others) completes it (``collectives.RowsReduction``, the rule
``spmmgnn.nn.allreduce_gradients`` applies to user models too). Every rank then applies the
same Adam step, so the weights stay identical without being broadcast again.

The gradients live in one flat buffer (``GradientBuckets``: every parameter's ``.grad`` is a
view into it), followed by the local loss sum and a "this rank's loss or gradient is not
finite" flag. The buffer is cut into buckets in the order the backward fills it (the last
layers' parameters first); a bucket's sum over the ranks is posted as soon as the backward
has accumulated all its gradients (``register_post_accumulate_grad_hook``), through the
grid's link (MPI's ``Iallreduce``, or ``torch.distributed``'s ``all_reduce(async_op=True)``:
Gloo or NCCL), so it travels while the backward computes the earlier layers; the last
bucket carries the loss and the flag and is posted when the backward returns. The step waits
for all of them before Adam.

Time breakdown of a training step (ICPP'24 Fig. 4, SuperGCN Fig. 9), per rank:
``spmm_local`` (local sparse multiplies), ``exchange`` (halo / block-row communication),
``allreduce`` (the wait for the gradient sums, and the 1.5D partial-sum all-reduce),
``dense`` (forward and backward less the SpMMs inside them -- dense matmuls, LayerNorm,
dropout, loss, the buckets posted meanwhile -- plus the optimizer step), ``other`` (the rest:
zeroing the gradients, the finite checks).
"""

from __future__ import annotations

import time

import numpy as np
import torch

from ..exchange.collectives import RowsReduction
from ..runtime.errors import collective_error
from ..runtime.threads import scope
from ..runtime.wire import allgather_json

BUCKET_BYTES = 64 * 1024  # a bucket closes once it holds this many bytes of gradients


class GradientBuckets:
    """The flat gradient buffer of ``params`` on ``backend`` and its bucketed, asynchronous
    sum over the ranks of ``grid`` holding distinct rows.

    Layout: the parameters in reverse order (the order the backward produces their
    gradients), then the flag ``flat[-2]`` and the loss ``flat[-1]``. Bucket k holds
    consecutive parameters of that order until it reaches ``BUCKET_BYTES``; the last bucket
    also holds the two slots. Buckets are posted in their order (the same on every rank,
    as collectives must be), each as soon as it and every bucket before it are ready."""

    def __init__(self, params: list, grid, backend, dtype: torch.dtype):
        self.params, self.grid, self.backend = params, grid, backend
        sizes = [p.numel() for p in params]
        self.n = sum(sizes)
        self.flat = backend.place(torch.zeros(self.n + 2, dtype=dtype))
        itemsize = self.flat.element_size()
        self.views: list = [None] * len(params)
        self.bucket_of: list[int] = [0] * len(params)
        bounds, offset, start = [], 0, 0
        for i in reversed(range(len(params))):
            self.views[i] = self.flat[offset:offset + sizes[i]].view_as(params[i])
            self.bucket_of[i] = len(bounds)
            offset += sizes[i]
            if (offset - start) * itemsize >= BUCKET_BYTES and offset < self.n:
                bounds.append((start, offset))
                start = offset
        bounds.append((start, self.n + 2))        # the last bucket: with flag and loss
        self.bounds = bounds
        self.sizes = [sum(1 for b in self.bucket_of if b == k) for k in range(len(bounds))]
        self.attach()
        self.armed = False
        self.reduction: RowsReduction | None = None
        self.bad = None
        self._left: list[int] = []
        self._next = 0
        for i, p in enumerate(params):
            p.register_post_accumulate_grad_hook(self._hook(i))

    def attach(self) -> None:
        """Every parameter's ``.grad`` is its view of the buffer (again, after a restore)."""
        for p, view in zip(self.params, self.views, strict=True):
            p.grad = view

    def _hook(self, i: int):
        def ready(p: torch.Tensor) -> None:
            if not self.armed:
                return
            view = self.views[i]
            if p.grad is not view:  # autograd replaced it: copy it into the buffer
                view.copy_(p.grad)
                p.grad = view
            k = self.bucket_of[i]
            self._left[k] -= 1
            self._post_ready()

        return ready

    def start(self, stats) -> None:
        """Before the forward: zero the buffer and arm the hooks for one backward."""
        self.flat.zero_()
        self.reduction = RowsReduction(self.grid, stats)
        self.bad = None
        self._left = list(self.sizes)
        self._left[-1] += 1          # the last bucket also waits for the loss
        self._next = 0
        self.armed = True

    def _post_ready(self) -> None:
        """Post, in bucket order, every bucket whose gradients are all in."""
        while self._next < len(self.bounds) and self._left[self._next] == 0:
            self._post(self._next)
            self._next += 1

    def _post(self, k: int) -> None:
        lo, hi = self.bounds[k]
        piece = self.flat[lo:hi]     # (the last: with the loss, and the flag still 0)
        bad = ~torch.isfinite(piece).all()
        self.bad = bad if self.bad is None else self.bad | bad
        if k == len(self.bounds) - 1:
            self.flat[-2] = self.bad.to(self.flat.dtype)
        self.reduction.post(self.backend.of_tensor(piece), f"gradients{k}")

    def finish(self, loss_sum: torch.Tensor) -> None:
        """After the backward: the loss into its slot, every bucket not posted yet (a
        parameter without a gradient leaves its bucket waiting) posted in order, then wait
        for all of them and give replica 0's sums to the other replicas."""
        self.armed = False
        self.flat[-1] = loss_sum.detach()
        self._left = [0] * len(self.bounds)
        self._post_ready()
        self.reduction.wait(self.backend.of_tensor(self.flat))
        self.reduction = None

    def local_ok(self) -> bool:
        """Whether this rank's own loss and gradients were finite (read on failure only)."""
        return not bool(self.bad)

    def outcome(self) -> tuple[float, bool]:
        """(the summed loss, whether every rank's loss and gradients were finite)."""
        loss, flag, finite = torch.stack([
            self.flat[-1], self.flat[-2],
            torch.isfinite(self.flat).all().to(self.flat.dtype)]).tolist()
        return loss, bool(finite) and not flag > 0


def _spmm_seconds(op) -> np.ndarray:
    s = op.stats
    return np.array([s.seconds_multiply, s.seconds_exchange, s.seconds_allreduce])


class TrainingStep:
    """The step of a ``Trainer`` (its model, data, buckets, optimizer): ``train_step``."""

    def train_step(self, epoch: int) -> dict:
        """Forward, backward with the gradient sums posted as they are ready, wait, Adam.
        Returns the row for history. numba's, the BLAS's and torch's threads are the
        library's running threads for the whole step (``threads.scope``: fewer while other
        work keeps cores busy)."""
        with scope(blas=True, torch=True):
            return self._train_step(epoch)

    def _train_step(self, epoch: int) -> dict:
        op, be, buckets = self.data.op, self.backend, self.buckets
        t0 = time.perf_counter()
        s0 = _spmm_seconds(op)
        bytes0 = op.stats.bytes_sent
        self.model.train()
        buckets.start(op.stats)
        t_forward = time.perf_counter()
        logits = self.forward(self.x, op, step=epoch, vertex_ids=self.vertex_ids,
                              label_input=self.label_input, layer_ops=self.layer_ops)
        loss_sum = be.loss_sum(logits, self.labels, self.loss_rows)
        (loss_sum / self.loss_count).backward()
        be.synchronize()
        t_reduce = time.perf_counter()
        buckets.finish(loss_sum)
        loss, healthy = buckets.outcome()
        t_reduced = time.perf_counter()
        if not healthy:
            self._diverged(epoch, buckets.local_ok())
        t_step = time.perf_counter()
        self.optimizer.step()
        be.synchronize()
        t_end = time.perf_counter()
        multiply, exchange, spmm_allreduce = _spmm_seconds(op) - s0
        # every SpMM runs inside forward/backward: what else runs there is the dense work
        dense = (t_reduce - t_forward) - (multiply + exchange + spmm_allreduce)
        breakdown = dict(spmm_local=multiply, exchange=exchange,
                         allreduce=(t_reduced - t_reduce) + spmm_allreduce,
                         dense=max(0.0, dense) + (t_end - t_step))
        total = t_end - t0
        breakdown["other"] = max(0.0, total - sum(breakdown.values()))
        return dict(epoch=epoch, loss=loss / self.loss_count,
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
