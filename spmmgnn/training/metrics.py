"""Masked loss and accuracy over the global masks, reduced over the ranks with distinct rows.

Every sum is over the grid's ``across_block_rows`` communicator (one rank per block row):
replicas of a block row (1.5D) hold the same rows and would count them ``c`` times over the
whole world.
"""

from __future__ import annotations

import numpy as np
import torch
from mpi4py import MPI

from ..backend.dense_host import MaskedCrossEntropy, rows_loss_sum  # noqa: F401 (its names)
from .data import SPLITS


def masked_loss_sum(logits: torch.Tensor, labels: torch.Tensor,
                    mask: torch.Tensor) -> torch.Tensor:
    """Sum of cross-entropy over this rank's masked rows (divide by the *global* count).

    One fused pass each way (``MaskedCrossEntropy``); the value is the sum of torch's
    ``cross_entropy`` terms up to rounding (the per-row terms are summed in float64)."""
    return rows_loss_sum(logits, labels, torch.nonzero(mask, as_tuple=True)[0])


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
