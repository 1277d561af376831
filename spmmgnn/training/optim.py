"""Adam with L2 weight decay, the arithmetic of ``torch.optim.Adam`` (single-tensor path).

Why not ``torch.optim.Adam`` itself: constructing any ``torch.optim.Optimizer`` imports
``torch._dynamo``, which costs ~2 s per process -- per rank, at every launch. The update is
the same sequence of tensor operations as torch's CPU implementation (amsgrad off), and
``state_dict`` has torch's layout, so checkpoints name the same things.

The update runs as one fused pass per parameter (``_adam_kernel``, numba, parallel; its
serial twin below ``kernels.SERIAL_WORK`` elements): each element reads its parameter,
gradient and two moments once and writes three, in the parameter's precision, instead of the
eight tensor operations (each a pass, each a call) of torch's path. Every element is
independent, so the result does not depend on the thread count (bit for bit); it equals
torch's to rounding (the order of a few float operations differs: tested over steps against
``torch.optim.Adam``). A parameter whose data or gradient is not contiguous takes the tensor
path, and so does every parameter with ``fused=False`` (the trainer on a device grid:
torch's tensor operations on the parameters' device, the same functions on ``device="cpu"``
as on CUDA; equal to the fused pass to rounding, tested).
The step counters stay on the CPU (as torch's non-capturable Adam keeps them), so reading
them never waits for a device.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from numba import prange

from ..local.kernels import SERIAL_WORK
from ..runtime.jit import eager_njit


class Adam:
    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, fused: bool = True):
        self.params = list(params)
        self.fused = fused
        self.group = dict(lr=float(lr), betas=tuple(betas), eps=float(eps),
                          weight_decay=float(weight_decay))
        self.state: dict[int, dict[str, torch.Tensor]] = {}

    @torch.no_grad()
    def step(self) -> None:
        lr, (beta1, beta2) = self.group["lr"], self.group["betas"]
        eps, wd = self.group["eps"], self.group["weight_decay"]
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            grad = p.grad
            st = self.state.get(i)
            if st is None:
                st = self.state[i] = dict(step=torch.tensor(0.0),
                                          exp_avg=torch.zeros_like(p),
                                          exp_avg_sq=torch.zeros_like(p))
            st["step"] += 1
            if self.fused and _fused(p, grad, st):
                step = float(st["step"])
                t = p.dtype
                kernel = _adam_kernel if p.numel() >= SERIAL_WORK else _adam_serial
                kernel(*(x.detach().numpy().reshape(-1) for x in
                               (p, grad, st["exp_avg"], st["exp_avg_sq"])),
                             *(np.dtype(str(t).removeprefix("torch.")).type(v) for v in
                               (1 - beta1, beta2, 1 - beta2, wd, eps,
                                math.sqrt(1 - beta2 ** step), lr / (1 - beta1 ** step))))
                continue
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

    def state_dict(self) -> dict:
        return dict(state={i: dict(st) for i, st in self.state.items()},
                    param_groups=[dict(self.group, params=list(range(len(self.params))))])

    def load_state_dict(self, state_dict: dict) -> None:
        group = dict(state_dict["param_groups"][0])
        group.pop("params", None)
        self.group.update({k: group[k] for k in self.group if k in group})
        self.group["betas"] = tuple(self.group["betas"])
        self.state = {}
        for i, st in state_dict["state"].items():
            p = self.params[int(i)]
            self.state[int(i)] = dict(
                step=torch.as_tensor(st["step"], dtype=torch.float32).clone().reshape(()),
                exp_avg=st["exp_avg"].to(p.device, p.dtype).clone().reshape(p.shape),
                exp_avg_sq=st["exp_avg_sq"].to(p.device, p.dtype).clone().reshape(p.shape))


def _fused(p: torch.Tensor, grad: torch.Tensor, st: dict) -> bool:
    """The fused pass applies: float32/64, every array contiguous and of p's type."""
    arrays = (p, grad, st["exp_avg"], st["exp_avg_sq"])
    return (p.dtype in (torch.float32, torch.float64) and p.device.type == "cpu"
            and all(x.is_contiguous() and x.dtype == p.dtype and x.shape == p.shape
                    for x in arrays))


@eager_njit(inline="always", cache=True, nogil=True, boundscheck=False)
def _adam_element(i, p, g, m, v, one_b1, b2, one_b2, wd, eps, bc2_sqrt, step_size):
    """Element i of one Adam step: g += wd p; m lerps to g; v = b2 v + (1-b2) g^2;
    p -= step_size m / (sqrt(v) / sqrt(bc2) + eps). Inlined into both loops below, so the
    parallel kernel and its serial twin run the same arithmetic."""
    gi = g[i] + wd * p[i] if wd != 0 else g[i]
    mi = m[i] + one_b1 * (gi - m[i])
    vi = v[i] * b2 + one_b2 * gi * gi
    m[i] = mi
    v[i] = vi
    p[i] = p[i] - step_size * (mi / (np.sqrt(vi) / bc2_sqrt + eps))


@eager_njit(parallel=True, cache=True, nogil=True, boundscheck=False)
def _adam_kernel(p, g, m, v, one_b1, b2, one_b2, wd, eps, bc2_sqrt, step_size):
    """One Adam step over every element (``_adam_element``), in parallel."""
    for i in prange(p.shape[0]):
        _adam_element(i, p, g, m, v, one_b1, b2, one_b2, wd, eps, bc2_sqrt, step_size)


@eager_njit(cache=True, nogil=True, boundscheck=False)
def _adam_serial(p, g, m, v, one_b1, b2, one_b2, wd, eps, bc2_sqrt, step_size):
    """The serial twin of ``_adam_kernel``, for parameters below ``kernels.SERIAL_WORK``
    elements (a GCN's weights and biases: waking the threads for a few thousand elements
    costs more than the update, 0.49 against 0.12 ms a step at 2 threads)."""
    for i in range(p.shape[0]):
        _adam_element(i, p, g, m, v, one_b1, b2, one_b2, wd, eps, bc2_sqrt, step_size)
