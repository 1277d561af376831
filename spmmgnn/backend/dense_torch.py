"""The dense operations of a training step on the torch backend, by torch's own operations on
the tensors' device (autograd gives every backward): the same functions run on
``device="cpu"`` as on CUDA, so CI tests the device path.

Dropout is ``backend.fused``: bias + ReLU + dropout as one pass each way (Triton kernels on
CUDA, their bit-identical torch twin elsewhere), its mask of entry ``(v, k)`` a hash in
32-bit lanes of the site key ``mix64(seed, step, layer)``, the global vertex id and the
column. The masks are reproducible (the same seed gives the same masks on every device,
rank count and partition) and keep ``1 - p`` of the entries, but they are not the host's
splitmix64 draws: a torch run and a host run agree loss by loss only without dropout.
Input dropout (``vertex_dropout``) and the mask of the 3D model (``dropout_mask``) draw
from the same hash, so one run's dropout sites are all one generator.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from . import fused


def linear(h: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None,
           add: torch.Tensor | None = None) -> torch.Tensor:
    """``h @ w (+ b) (+ add)`` by torch's products on the tensors' device."""
    out = torch.addmm(b, h, w) if b is not None else h @ w
    return out if add is None else out + add


def dropout_mask(vertex_ids: torch.Tensor, f: int, p: float, seed: int, step: int,
                 layer: int, dtype=torch.float32) -> torch.Tensor:
    """``1/(1-p)`` where entry (v, k) is kept, 0 where dropped, on ``vertex_ids``' device."""
    n = vertex_ids.shape[0]
    if p <= 0:
        return torch.ones((n, f), dtype=dtype, device=vertex_ids.device)
    keep = fused.keep_mask(vertex_ids, f, p, seed, step, layer)
    return keep.to(dtype) * (1.0 / (1.0 - p))


def relu_dropout(z: torch.Tensor, vertex_ids: torch.Tensor, p: float, seed: int, step: int,
                 layer: int, bias: torch.Tensor | None = None, col0: int = 0) -> torch.Tensor:
    """``dropout(relu(z + bias))`` in one fused pass forward and one backward
    (``fused.bias_relu_dropout``): the kept entries are ``relu(z + bias) * (1/(1-p))`` with
    the scale rounded to z's dtype first; NaN stays NaN, a dropped Inf is 0. ``col0``: z's
    first column is feature ``col0`` (a block of the features)."""
    return fused.bias_relu_dropout(z, bias, vertex_ids, min(max(p, 0.0), 1.0), seed, step,
                                   layer, col0=col0)


def vertex_dropout(x: torch.Tensor, vertex_ids: torch.Tensor, p: float, seed: int,
                   step: int, layer: int) -> torch.Tensor:
    """Dropout of rows ``x`` (one per vertex id) with the partition-invariant mask."""
    if p <= 0:
        return x
    if p >= 1:
        return torch.zeros_like(x)
    return x * dropout_mask(vertex_ids, x.shape[1], p, seed, step, layer, x.dtype)


def loss_sum(logits: torch.Tensor, labels: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """Sum of cross-entropy over the rows ``rows`` (their indices, computed once: no
    mask-to-index step, so no device sync per call)."""
    return F.cross_entropy(logits.index_select(0, rows), labels.index_select(0, rows),
                           reduction="sum")


def evaluation_sums(logits: torch.Tensor, labels: torch.Tensor, rows: list) -> torch.Tensor:
    """Per split (its rows' indices in ``rows``), the loss sum and the number of correct
    predictions, float64 on the device (one tensor: one copy to the host)."""
    pred = logits.argmax(dim=1)
    z = logits.double()
    parts = []
    for idx in rows:
        parts.append(loss_sum(z, labels, idx))
        parts.append((pred.index_select(0, idx) == labels.index_select(0, idx)).sum()
                     .to(torch.float64))
    return torch.stack(parts)


def adam_step(p: torch.Tensor, grad: torch.Tensor, st: dict, lr: float, betas, eps: float,
              wd: float) -> None:
    """One Adam step of ``p`` by torch's tensor operations (``torch.optim.Adam``'s
    single-tensor path, amsgrad off); ``st["step"]`` is already advanced."""
    beta1, beta2 = betas
    if wd != 0:
        grad = grad.add(p, alpha=wd)
    st["exp_avg"].lerp_(grad, 1 - beta1)
    st["exp_avg_sq"].mul_(beta2).addcmul_(grad, grad.conj(), value=1 - beta2)
    step = float(st["step"])
    bias_correction1 = 1 - beta1 ** step
    bias_correction2 = 1 - beta2 ** step
    step_size = lr / bias_correction1
    denom = (st["exp_avg_sq"].sqrt() / math.sqrt(bias_correction2)).add_(eps)
    p.addcdiv_(st["exp_avg"], denom, value=-step_size)
