"""The vertex-keyed dropout of ``nn.dropout`` in torch operations, for device grids.

The mask of entry ``(v, k)`` is the same splitmix64 of ``(key, v, k)`` as the numba kernels
compute (``nn.dropout._mask_kernel``), evaluated with torch int64 operations on the tensors'
device: int64 multiplication and addition wrap modulo 2**64 like uint64's, XOR is the same on
the bits, and the logical right shift is the arithmetic one masked to the bits it keeps. So a
device run drops exactly the entries a numba run drops (bit-identical masks, tested), and
``device="cpu"`` runs the very functions CUDA runs. No value leaves the device.
"""

from __future__ import annotations

import numpy as np
import torch

from ..local.hashing import GOLDEN, splitmix64_torch
from ..local.hashing import shr64 as _shr
from ..local.hashing import signed64 as _signed
from .dropout import _threshold, stream_key

COLUMN = 0xD1B54A32D192ED03  # the per-column stride of the numba kernels


def keep_mask(vertex_ids: torch.Tensor, f: int, p: float, key) -> torch.Tensor:
    """Bool ``len(vertex_ids) x f``: True where the numba kernels keep entry (v, k)."""
    ids = vertex_ids.to(torch.int64)
    base = splitmix64_torch(ids * _signed(GOLDEN) ^ _signed(int(key)))
    cols = torch.arange(f, dtype=torch.int64, device=ids.device) * _signed(COLUMN)
    h = splitmix64_torch(base[:, None] + cols[None, :])
    return _shr(h, 40) >= int(_threshold(p))


def device_ids(vertex_ids, device) -> torch.Tensor:
    """The global vertex ids as an int64 tensor on ``device`` (a tensor there: itself)."""
    if isinstance(vertex_ids, torch.Tensor) and vertex_ids.device == device:
        return vertex_ids
    return torch.as_tensor(np.ascontiguousarray(vertex_ids, dtype=np.int64)).to(device)


def dropout_mask_torch(vertex_ids: torch.Tensor, f: int, p: float, seed: int, step: int,
                       layer: int, dtype=torch.float32) -> torch.Tensor:
    """``nn.dropout.dropout_mask`` on ``vertex_ids``' device: ``1/(1-p)`` kept, 0 dropped."""
    n = vertex_ids.shape[0]
    if p <= 0:
        return torch.ones((n, f), dtype=dtype, device=vertex_ids.device)
    keep = keep_mask(vertex_ids, f, p, stream_key(seed, step, layer))
    return keep.to(dtype) * (1.0 / (1.0 - p))


def relu_dropout_torch(z: torch.Tensor, vertex_ids: torch.Tensor, p: float, seed: int,
                       step: int, layer: int, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``nn.dropout.relu_dropout`` by torch operations (autograd gives the backward): the
    kept entries are ``relu(z + bias) * (1/(1-p))`` with the scale rounded to z's dtype
    first, as the numba kernel does; NaN stays NaN, a dropped Inf is 0."""
    h = torch.relu(z if bias is None else z + bias)
    if p <= 0:
        return h
    if p >= 1:
        return h * 0
    keep = keep_mask(vertex_ids, z.shape[1], p, stream_key(seed, step, layer))
    scale = float(np.dtype(str(z.dtype).removeprefix("torch.")).type(1.0 / (1.0 - p)))
    # dropped entries are 0 (also an Inf one), NaN stays NaN kept or dropped
    return torch.where(keep | torch.isnan(h), h * scale, torch.zeros((), dtype=h.dtype,
                                                                    device=h.device))


def vertex_dropout_torch(x: torch.Tensor, vertex_ids: torch.Tensor, p: float, seed: int,
                         step: int, layer: int) -> torch.Tensor:
    """``nn.dropout.vertex_dropout`` by torch operations on ``x``'s device."""
    if p <= 0:
        return x
    if p >= 1:
        return torch.zeros_like(x)
    return x * dropout_mask_torch(vertex_ids, x.shape[1], p, seed, step, layer, x.dtype)
