"""Adam with L2 weight decay, the arithmetic of ``torch.optim.Adam`` (single-tensor path).

Why not ``torch.optim.Adam`` itself: constructing any ``torch.optim.Optimizer`` imports
``torch._dynamo``, which costs ~2 s per process -- per rank, at every launch. The update is
the same sequence of tensor operations as torch's CPU implementation (amsgrad off), and
``state_dict`` has torch's layout, so checkpoints name the same things.

Each parameter's update is its grid's backend's (``Backend.adam_step``): on the host one
fused numba pass per parameter (``local.dense_kernels.adam_kernel``, its serial twin below
``kernels.SERIAL_WORK`` elements): each element reads its parameter, gradient and two
moments once and writes three, in the parameter's precision, instead of the eight tensor
operations (each a pass, each a call) of torch's path. Every element is independent, so the
result does not depend on the thread count (bit for bit); it equals torch's to rounding (the
order of a few float operations differs: tested over steps against ``torch.optim.Adam``). A
parameter whose data or gradient is not contiguous takes the tensor path. On the torch
backend the update is torch's tensor operations on the parameters' device (the same
functions on ``device="cpu"`` as on CUDA; equal to the fused pass to rounding, tested).
The step counters stay on the CPU (as torch's non-capturable Adam keeps them), so reading
them never waits for a device.
"""

from __future__ import annotations

import torch

from ..backend.host import HOST
from ..local.dense_kernels import adam_kernel as _adam_kernel  # noqa: F401 (tested)
from ..local.dense_kernels import adam_serial as _adam_serial  # noqa: F401


class Adam:
    """``torch.optim.Adam`` (L2 weight decay, amsgrad off) on ``backend``'s tensors (the
    host's by default)."""

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, backend=HOST):
        self.params = list(params)
        self.backend = backend
        self.group = dict(lr=float(lr), betas=tuple(betas), eps=float(eps),
                          weight_decay=float(weight_decay))
        self.state: dict[int, dict[str, torch.Tensor]] = {}

    @torch.no_grad()
    def step(self) -> None:
        g = self.group
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            st = self.state.get(i)
            if st is None:
                st = self.state[i] = dict(step=torch.tensor(0.0),
                                          exp_avg=torch.zeros_like(p),
                                          exp_avg_sq=torch.zeros_like(p))
            st["step"] += 1
            self.backend.adam_step(p, p.grad, st, g["lr"], g["betas"], g["eps"],
                                   g["weight_decay"])
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
