"""``dropout(relu(z + bias))`` with vertex-keyed masks as one pass forward and one backward.

The mask of entry ``(v, k)`` (global vertex id ``v``, feature column ``k``) at one dropout
site is a 32-bit counter-based hash of ``(key, v, k)``, where ``key`` is the 64-bit
``hashing.mix64(seed, step, layer)`` the numba path keys its masks with. So a mask depends
on the seed, the step, the layer, the vertex and the column only: the same on any number of
ranks and any partition, and reproducible. The hash works in 32-bit lanes (``mix32``, the
"lowbias32" integer finalizer: two multiplications, three xor-shifts):

    row(v)   = mix32(mix32(lo(v) ^ lo(key)) ^ hi(v) ^ hi(key))      once per row
    col(k)   = mix32(k * 0x9E3779B9 ^ hi(key))                       once per column
    h(v, k)  = mix32(row(v) ^ col(k))                                once per entry
    keep     = h >> 8 >= round(p * 2**24)                            (hashing.keep_threshold)

Kept entries are ``relu(z + bias) / (1 - p)`` (the scale rounded to z's dtype first), NaN
stays NaN kept or dropped (a diverging run must not look healthy), a dropped Inf is 0. The
masks differ from the numba path's splitmix64 ones (same rate, other draws).

Two implementations compute the same masks bit for bit:

- Triton kernels (``backend.fused_triton``, imported on first use): on CUDA tensors, and on
  CPU tensors when Triton's interpreter is on (``TRITON_INTERPRET=1``). No n x f integer
  temporaries: the hash lives in registers.
- torch operations (``_forward_torch``): everywhere else (CPU tensors; a torch without
  Triton). The hash runs in int64 lanes holding 32-bit values, a block of rows at a time,
  so its temporaries stay small.

Backward: ``d out / d z`` is ``1 / (1 - p)`` exactly where ``out > 0`` (kept and
``z + bias > 0``), so autograd keeps the output and nothing else: no mask is stored and none
is recomputed. When the next layer multiplies the output by its weight first (``A (H W)``,
a GCN layer narrowing to the classes), that product keeps the same storage, so the pass
adds no saved bytes of its own; storing a uint8 mask would add n x f bytes, and recomputing
the mask from ``z`` would keep ``z`` (4 n x f bytes in float32).
The bias gradient is the column sum of the input gradient, taken as one partial sum per
block of ``BLOCK_M`` rows, then summed in order: the same bits on every run.
"""

from __future__ import annotations

import functools
import importlib.util
import os

import numpy as np
import torch

from ..local.hashing import KEEP_BITS, keep_threshold, mix64

M32 = 0xFFFFFFFF
MIX1, MIX2 = 0x7FEB352D, 0x846CA68B   # lowbias32's multipliers
COLUMN = 0x9E3779B9                   # 2**32 / golden ratio: the column stride
DROP_SHIFT = 32 - KEEP_BITS
CHUNK = 1 << 20  # entries the torch implementation hashes at a time (8 MiB per int64 temporary)
DTYPES = (torch.float32, torch.float64)
assert DROP_SHIFT == 8  # the kernels' ``h >> 8``


def key_words(seed: int, step: int, layer: int) -> tuple[int, int]:
    """The low and high 32 bits of the dropout site's key (the numba path's key)."""
    key = mix64(seed, step, layer)
    return key & M32, key >> 32


def _signed32(w: int) -> int:
    """The int32 with the bits of the 32-bit word ``w`` (a Triton argument's type is fixed
    by its value: always int32 here, so a new key never compiles a new kernel)."""
    return w - (1 << 32) if w >= 1 << 31 else w


# ------------------------------------------------------------------ the torch implementation
def mix32_torch(x: torch.Tensor) -> torch.Tensor:
    """``mix32`` of 32-bit values held in an int64 tensor (products of two 32-bit values wrap
    modulo 2**64; their low 32 bits are exact)."""
    x = x ^ (x >> 16)
    x = (x * MIX1) & M32
    x = x ^ (x >> 15)
    x = (x * MIX2) & M32
    return x ^ (x >> 16)


def row_hash_torch(vertex_ids: torch.Tensor, k0: int, k1: int) -> torch.Tensor:
    """``row(v)`` per vertex id (int64 in, 32-bit values in int64 out)."""
    ids = vertex_ids.to(torch.int64)
    lo, hi = ids & M32, (ids >> 32) & M32
    return mix32_torch(mix32_torch(lo ^ k0) ^ hi ^ k1)


def col_hash_torch(f: int, col0: int, k1: int, device) -> torch.Tensor:
    """``col(k)`` for columns ``col0 .. col0 + f - 1``."""
    k = torch.arange(col0, col0 + f, dtype=torch.int64, device=device)
    return mix32_torch(((k * COLUMN) & M32) ^ k1)


def keep_mask(vertex_ids, f: int, p: float, seed: int, step: int, layer: int,
              col0: int = 0) -> torch.Tensor:
    """Bool ``len(vertex_ids) x f``: True where the pass keeps entry (v, col0 + k), hashed a
    block of rows at a time (no n x f integer temporary)."""
    ids = as_ids(vertex_ids, None)
    k0, k1 = key_words(seed, step, layer)
    cols = col_hash_torch(f, col0, k1, ids.device)
    cut = keep_threshold(p)
    keep = torch.empty((ids.shape[0], f), dtype=torch.bool, device=ids.device)
    step_rows = max(1, CHUNK // max(1, f))
    for a in range(0, ids.shape[0], step_rows):
        rows = row_hash_torch(ids[a:a + step_rows], k0, k1)
        torch.ge(mix32_torch(rows[:, None] ^ cols[None, :]) >> DROP_SHIFT, cut,
                 out=keep[a:a + step_rows])
    return keep


def _forward_torch(z, bias, ids, k0: int, k1: int, threshold: int, scale: float, drop: bool,
                   col0: int) -> torch.Tensor:
    out = torch.empty_like(z)
    cols = col_hash_torch(z.shape[1], col0, k1, z.device) if drop else None
    s = _scale_tensor(scale, z)
    step = max(1, CHUNK // max(1, z.shape[1]))
    for a in range(0, z.shape[0], step):
        r = torch.relu(z[a:a + step] if bias is None else z[a:a + step] + bias)
        if not drop:
            out[a:a + step] = r
            continue
        rows = row_hash_torch(ids[a:a + step], k0, k1)
        keep = (mix32_torch(rows[:, None] ^ cols[None, :]) >> DROP_SHIFT) >= threshold
        torch.where(keep | torch.isnan(r), r * s, torch.zeros((), dtype=r.dtype,
                                                             device=r.device),
                    out=out[a:a + step])
    return out


def _backward_torch(out, grad, scale: float, with_bias: bool):
    # a bool mask and the result, no third tensor: where(), then the scale in place (the
    # bits of grad * scale where kept)
    grad_in = torch.where(out > 0, grad, torch.zeros((), dtype=grad.dtype, device=grad.device))
    grad_in.mul_(_scale_tensor(scale, grad))
    return grad_in, (grad_in.sum(0) if with_bias else None)


# ------------------------------------------------------------------ the Triton kernels
@functools.cache
def _kernels():
    """The module of Triton kernels (None: Triton is not installed)."""
    if importlib.util.find_spec("triton") is None:
        return None
    return importlib.import_module(".fused_triton", __package__)


def _interpreter_on() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def triton_runs_on(device: torch.device) -> bool:
    """Whether the Triton kernels run on tensors of ``device`` in this process: CUDA with
    Triton installed; CPU when the kernels were built for Triton's interpreter
    (``TRITON_INTERPRET=1`` when they were first needed)."""
    if device.type == "cuda":
        return _kernels() is not None
    if device.type != "cpu" or not _interpreter_on():
        return False
    k = _kernels()
    return k is not None and k.interpreted()


def _blocks(f: int) -> tuple[int, int]:
    """(BLOCK_M, BLOCK_N): a tile of about 4096 entries, at most 128 columns wide."""
    block_n = min(128, 1 << max(0, f - 1).bit_length())
    return max(1, 4096 // block_n), block_n


def _grid(n: int, f: int, bm: int, bn: int) -> tuple[int, int]:
    return -(-n // bm), -(-f // bn)


def _scale_tensor(scale: float, like: torch.Tensor) -> torch.Tensor:
    """``scale`` as a one-element tensor of ``like``'s dtype (a kernel's float argument would
    be a float32; float64 rows need the float64 scale)."""
    return torch.full((1,), scale, dtype=like.dtype, device=like.device)


def _forward_triton(z, bias, ids, k0: int, k1: int, threshold: int, scale: float, drop: bool,
                    col0: int) -> torch.Tensor:
    n, f = z.shape
    out = torch.empty_like(z)
    if z.numel() == 0:
        return out
    bm, bn = _blocks(f)
    kernel = _kernels().forward_kernel[_grid(n, f, bm, bn)]
    kernel(z, z if bias is None else bias, ids, _scale_tensor(scale, z), out, n, f,
           _signed32(k0), _signed32(k1), col0, threshold, HAS_BIAS=bias is not None,
           DROP=drop, BLOCK_M=bm, BLOCK_N=bn)
    return out


def _backward_triton(out, grad, scale: float, with_bias: bool):
    n, f = out.shape
    grad_in = torch.empty_like(grad)
    if grad.numel() == 0:
        return grad_in, (grad.new_zeros(f) if with_bias else None)
    bm, bn = _blocks(f)
    grid = _grid(n, f, bm, bn)
    partial = (torch.empty((grid[0], f), dtype=grad.dtype, device=grad.device) if with_bias
               else grad_in)
    _kernels().backward_kernel[grid](out, grad, _scale_tensor(scale, grad), grad_in, partial,
                                     n, f, HAS_BIAS=with_bias, BLOCK_M=bm, BLOCK_N=bn)
    return grad_in, (partial.sum(0) if with_bias else None)


# ------------------------------------------------------------------ the autograd function
class BiasReluDropout(torch.autograd.Function):
    """``dropout(relu(z + bias))`` forward; backward from the saved output alone."""

    @staticmethod
    def forward(ctx, z, bias, ids, k0: int, k1: int, threshold: int, scale: float,
                drop: bool, col0: int, use_triton: bool):
        z = z.detach().contiguous()
        b = None if bias is None else bias.detach().contiguous()
        run = _forward_triton if use_triton else _forward_torch
        out = run(z, b, ids, k0, k1, threshold, scale, drop, col0)
        ctx.save_for_backward(out)
        ctx.scale, ctx.use_triton = scale, use_triton
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        with_bias = ctx.needs_input_grad[1]
        run = _backward_triton if ctx.use_triton else _backward_torch
        grad_in, grad_b = run(out, grad.contiguous(), ctx.scale, with_bias)
        if not ctx.needs_input_grad[0]:
            grad_in = None
        return grad_in, grad_b, None, None, None, None, None, None, None, None


def as_ids(vertex_ids, device) -> torch.Tensor:
    """The global vertex ids as an int64 tensor (on ``device``; None: where they are)."""
    if isinstance(vertex_ids, torch.Tensor):
        ids = vertex_ids if vertex_ids.dtype == torch.int64 else vertex_ids.to(torch.int64)
    else:
        ids = torch.from_numpy(np.ascontiguousarray(vertex_ids, dtype=np.int64))
    return ids if device is None else ids.to(device).contiguous()


def bias_relu_dropout(z: torch.Tensor, bias: torch.Tensor | None, vertex_ids, p: float,
                      seed: int, step: int, layer: int, training: bool = True,
                      col0: int = 0, impl: str = "auto") -> torch.Tensor:
    """``dropout(relu(z + bias))`` of the rows ``z`` (one per id in ``vertex_ids``, a tensor
    or array of global vertex ids), differentiable in ``z`` and ``bias`` (None: no bias).
    ``training=False`` or ``p=0``: ``relu(z + bias)`` in the same single pass. ``col0``:
    z's first column is feature ``col0`` (a block of the features gets that block's mask).
    ``impl``: "auto" (Triton where it runs on z's device, else torch), "triton" or
    "torch"; both give the same values and masks."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability must lie in [0, 1], got {p}")
    if z.dim() != 2 or z.dtype not in DTYPES:
        raise ValueError(f"z must be a 2-D float32 or float64 tensor, got {tuple(z.shape)} "
                         f"{z.dtype}")
    if bias is not None and (bias.shape != (z.shape[1],) or bias.dtype != z.dtype):
        raise ValueError(f"bias must be a {z.dtype} vector of {z.shape[1]}, got "
                         f"{tuple(bias.shape)} {bias.dtype}")
    if impl not in ("auto", "triton", "torch"):
        raise ValueError(f"impl must be auto, triton or torch, got {impl!r}")
    use_triton = triton_runs_on(z.device) if impl == "auto" else impl == "triton"
    if use_triton and not triton_runs_on(z.device):
        raise RuntimeError(f"the Triton kernels do not run on {z.device} here (Triton "
                           "installed, and on CPU tensors TRITON_INTERPRET=1)")
    ids = as_ids(vertex_ids, z.device)
    if ids.shape != (z.shape[0],):
        raise ValueError(f"{ids.shape[0]} vertex ids for {z.shape[0]} rows")
    drop = bool(training) and p > 0
    threshold = keep_threshold(p) if drop else 0
    scale = (1.0 / (1.0 - p) if p < 1 else 0.0) if drop else 1.0  # rounded to z's dtype
    k0, k1 = key_words(seed, step, layer)
    return BiasReluDropout.apply(z, bias, ids, k0, k1, threshold, scale, drop, int(col0),
                                 use_triton)
