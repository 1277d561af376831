"""Masked loss and accuracy over the global masks, reduced over the ranks with distinct rows.

Every sum is over the grid's ``across_block_rows`` communicator (one rank per block row):
replicas of a block row (1.5D) hold the same rows and would count them ``c`` times over the
whole world.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from mpi4py import MPI
from numba import prange

from ..runtime.jit import eager_njit
from .data import SPLITS


def masked_loss_sum(logits: torch.Tensor, labels: torch.Tensor,
                    mask: torch.Tensor) -> torch.Tensor:
    """Sum of cross-entropy over this rank's masked rows (divide by the *global* count).

    One fused pass each way (``MaskedCrossEntropy``); the value is the sum of torch's
    ``cross_entropy`` terms up to rounding (the per-row terms are summed in float64)."""
    return rows_loss_sum(logits, labels, torch.nonzero(mask, as_tuple=True)[0])


def rows_loss_sum(logits: torch.Tensor, labels: torch.Tensor,
                  idx: torch.Tensor) -> torch.Tensor:
    """``masked_loss_sum`` over the rows ``idx`` (the mask's indices, computed once by the
    trainer: finding them in a 1M-row mask took 15-24 ms of every step on 16 threads)."""
    if logits.dim() != 2 or not logits.dtype.is_floating_point:
        return F.cross_entropy(logits.index_select(0, idx), labels.index_select(0, idx),
                               reduction="sum")
    return MaskedCrossEntropy.apply(logits, labels, idx)


def masked_loss_sum_torch(logits: torch.Tensor, labels: torch.Tensor,
                          rows: torch.Tensor) -> torch.Tensor:
    """``masked_loss_sum`` by torch operations for device grids: ``rows`` are the masked
    rows' indices (computed once: no mask-to-index step, so no device sync per call)."""
    return F.cross_entropy(logits.index_select(0, rows), labels.index_select(0, rows),
                           reduction="sum")


class MaskedCrossEntropy(torch.autograd.Function):
    """``sum_{i in idx} logsumexp(z_i) - z_i[y_i]`` without copying the selected rows out:
    forward keeps each row's logsumexp, backward writes ``softmax(z_i) - onehot(y_i)`` times
    the incoming gradient into the selected rows of a zeroed gradient (one pass over the
    logits each way; torch's index_select, log_softmax, nll_loss and their backwards took
    about 10x the logits' bandwidth time, bench/floor.py)."""

    @staticmethod
    def forward(ctx, logits, labels, idx):
        z = logits.detach().contiguous().numpy()
        y = labels.detach().numpy().astype(np.int64, copy=False)
        rows = idx.numpy().astype(np.int64, copy=False)
        lse = np.empty(rows.size, dtype=np.float64)
        terms = np.empty(rows.size, dtype=np.float64)
        _ce_forward(z, y, rows, lse, terms)
        ctx.save_for_backward(logits, labels, idx)
        ctx.lse = lse
        return torch.tensor(terms.sum(), dtype=logits.dtype)

    @staticmethod
    def backward(ctx, grad):
        logits, labels, idx = ctx.saved_tensors
        z = logits.detach().contiguous().numpy()
        out = np.empty_like(z)
        _ce_backward(z, labels.numpy().astype(np.int64, copy=False),
                     idx.numpy().astype(np.int64, copy=False), ctx.lse, float(grad), out)
        return torch.from_numpy(out), None, None


@eager_njit(parallel=True, cache=True, nogil=True, boundscheck=False)
def _ce_forward(z, y, rows, lse, terms):
    c = z.shape[1]
    for t in prange(rows.size):
        i = rows[t]
        m = -np.inf
        for k in range(c):
            m = max(m, float(z[i, k]))
        s = 0.0
        for k in range(c):
            s += np.exp(float(z[i, k]) - m)
        lse[t] = m + np.log(s)
        terms[t] = lse[t] - float(z[i, y[i]])


@eager_njit(parallel=True, cache=True, nogil=True, boundscheck=False)
def _ce_backward(z, y, rows, lse, g, out):
    n, c = z.shape
    for i in prange(n):
        for k in range(c):
            out[i, k] = 0.0
    for t in prange(rows.size):
        i = rows[t]
        for k in range(c):
            out[i, k] = g * np.exp(float(z[i, k]) - lse[t])
        out[i, y[i]] -= g


def evaluate(logits: torch.Tensor, labels: torch.Tensor, masks: dict[str, torch.Tensor],
             counts: dict[str, int], comm: MPI.Comm) -> dict[str, float]:
    """Global loss and accuracy per split from this rank's logits (one Allreduce)."""
    local = np.zeros(2 * len(SPLITS), dtype=np.float64)
    pred = logits.argmax(dim=1)
    for i, s in enumerate(SPLITS):
        m = masks[s]
        if bool(m.any()):
            local[2 * i] = float(masked_loss_sum(logits.double(), labels, m))
            local[2 * i + 1] = float((pred[m] == labels[m]).sum())
    return reduce_evaluation(local, counts, comm)


def reduce_evaluation(local: np.ndarray, counts: dict[str, int],
                      comm: MPI.Comm) -> dict[str, float]:
    """Global loss and accuracy per split from each rank's (loss sum, correct) per split in
    ``SPLITS`` order (float64; one Allreduce)."""
    total = np.empty_like(local)
    comm.Allreduce(local, total, op=MPI.SUM)
    out = {}
    for i, s in enumerate(SPLITS):
        c = max(1, counts[s])
        out[f"{s}_loss"] = total[2 * i] / c
        out[f"{s}_acc"] = total[2 * i + 1] / c
    return out
