"""Partition-invariant dropout: the mask of (vertex, feature) is a hash of its global ids.

A torch RNG draws masks in storage order, so the same seed gives different masks for a
different number of ranks, partition or replication. Here the keep/drop decision of entry
``(v, k)`` in layer ``l`` at step ``t`` is a counter-based hash (splitmix64) of
``(seed, t, l, v, k)`` where ``v`` is the vertex id in the source graph. So training is the
same computation whatever the layout: replicas of a block row (1.5D) draw the same masks, and
a single-process reference can reproduce a distributed run exactly.
"""

from __future__ import annotations

import numpy as np
import torch
from numba import prange, uint64

from ..local import hashing
from ..local.hashing import mix64
from ..runtime.buffers import recycled_empty
from ..runtime.jit import eager_njit, real
from ..runtime.threads import scoped

splitmix64 = real(hashing.splitmix64)  # eager numba kernels below call it


@eager_njit(parallel=True, cache=True, nogil=True, boundscheck=False)
def _mask_kernel(key, vertex_ids, f, threshold, scale, out):
    for i in prange(vertex_ids.shape[0]):
        base = splitmix64(key ^ (uint64(vertex_ids[i]) * uint64(0x9E3779B97F4A7C15)))
        for k in range(f):
            h = splitmix64(base + uint64(k) * uint64(0xD1B54A32D192ED03))
            out[i, k] = scale if (h >> uint64(40)) >= threshold else 0.0


@eager_njit(parallel=True, cache=True, nogil=True, boundscheck=False)
def _relu_dropout_kernel(z, bias, key, vertex_ids, col0, threshold, scale, out):
    """out = relu(z + bias) * mask in one pass (``bias`` empty: none; mask from the hash,
    never stored; column k is feature ``col0 + k``, so a block of the features gets the
    rows' mask). NaN stays NaN, kept or dropped, as in ``torch.relu(z) * mask``: a diverging
    run must not look healthy."""
    f = z.shape[1]
    with_bias = bias.shape[0] > 0
    for i in prange(z.shape[0]):
        base = splitmix64(key ^ (uint64(vertex_ids[i]) * uint64(0x9E3779B97F4A7C15)))
        for k in range(f):
            v = z[i, k] + bias[k] if with_bias else z[i, k]
            if v > 0:
                h = splitmix64(base + uint64(col0 + k) * uint64(0xD1B54A32D192ED03))
                out[i, k] = v * scale if (h >> uint64(40)) >= threshold else 0.0
            elif v != v:
                out[i, k] = v
            else:
                out[i, k] = 0.0


@eager_njit(parallel=True, cache=True, nogil=True, boundscheck=False)
def _relu_dropout_backward_kernel(out, grad, scale, grad_in):
    """d out / d z is ``scale`` exactly where out > 0 (kept and z > 0), else 0."""
    f = out.shape[1]
    for i in prange(out.shape[0]):
        for k in range(f):
            grad_in[i, k] = grad[i, k] * scale if out[i, k] > 0 else 0.0


BIAS_ROWS = 1024  # rows per partial sum of the bias gradient: fixed, so not set by threads


@eager_njit(parallel=True, cache=True, nogil=True, boundscheck=False)
def _relu_dropout_bias_backward_kernel(out, grad, scale, grad_in, partial):
    """``_relu_dropout_backward_kernel`` plus each block of ``BIAS_ROWS`` rows' column sums
    of ``grad_in`` in ``partial`` (blocks fixed by the row count: the same sums on any
    number of threads)."""
    n, f = out.shape
    for c in prange(partial.shape[0]):
        for k in range(f):
            partial[c, k] = 0.0
        for i in range(c * BIAS_ROWS, min(n, (c + 1) * BIAS_ROWS)):
            for k in range(f):
                gk = grad[i, k] * scale if out[i, k] > 0 else 0.0
                grad_in[i, k] = gk
                partial[c, k] += gk


def stream_key(seed: int, step: int, layer: int) -> np.uint64:
    """The 64-bit key of one dropout site (seed, training step, layer)."""
    return np.uint64(mix64(seed, step, layer))


@scoped
def dropout_mask(vertex_ids: np.ndarray, f: int, p: float, seed: int, step: int, layer: int,
                 dtype=np.float32) -> np.ndarray:
    """``len(vertex_ids) x f`` array holding ``1/(1-p)`` where kept and 0 where dropped."""
    out = np.empty((vertex_ids.shape[0], f), dtype=dtype)
    if p <= 0:
        out.fill(1)
        return out
    ids = np.ascontiguousarray(vertex_ids, dtype=np.int64)
    _mask_kernel(stream_key(seed, step, layer), ids, f, _threshold(p), dtype(1.0 / (1.0 - p)),
                 out)
    return out


def _threshold(p: float) -> np.uint64:
    return np.uint64(min(1 << 24, int(round(p * (1 << 24)))))


class ReluDropout(torch.autograd.Function):
    """``dropout(relu(z + bias))`` with the vertex-keyed mask, fused: one pass forward, one pass
    backward, the mask neither stored nor recomputed (the output tells where it kept)."""

    @staticmethod
    @scoped
    def forward(ctx, z: torch.Tensor, bias: torch.Tensor | None, vertex_ids: np.ndarray,
                p: float, key: np.uint64, col0: int = 0):
        zn = z.detach().contiguous().numpy()
        bn = (bias.detach().contiguous().numpy() if bias is not None
              else np.zeros(0, dtype=zn.dtype))
        out = recycled_empty(zn.shape, zn.dtype)
        scale = zn.dtype.type(1.0 / (1.0 - p))
        _relu_dropout_kernel(zn, bn, key, vertex_ids, col0, _threshold(p), scale, out)
        result = torch.from_numpy(out)
        ctx.save_for_backward(result)
        ctx.scale = scale
        return result

    @staticmethod
    @scoped
    def backward(ctx, grad: torch.Tensor):
        (out,) = ctx.saved_tensors
        g = grad.contiguous().numpy()
        grad_in = recycled_empty(g.shape, g.dtype)
        if not ctx.needs_input_grad[1]:
            _relu_dropout_backward_kernel(out.numpy(), g, ctx.scale, grad_in)
            return torch.from_numpy(grad_in), None, None, None, None, None
        partial = np.empty((-(-g.shape[0] // BIAS_ROWS), g.shape[1]), dtype=g.dtype)
        _relu_dropout_bias_backward_kernel(out.numpy(), g, ctx.scale, grad_in, partial)
        return (torch.from_numpy(grad_in), torch.from_numpy(partial.sum(0)), None, None,
                None, None)


def relu_dropout(z: torch.Tensor, vertex_ids: np.ndarray, p: float, seed: int, step: int,
                 layer: int, bias: torch.Tensor | None = None, col0: int = 0) -> torch.Tensor:
    """``vertex_dropout(relu(z + bias), ...)`` in one fused pass (same values, gradients to
    rounding: the bias gradient sums blocks of ``BIAS_ROWS`` rows, then the blocks in order,
    so it is the same on any number of threads). ``col0``: z's first column is feature
    ``col0`` (a block of the features, as the 2D layout holds them: the same mask)."""
    if p <= 0:
        return torch.relu(z if bias is None else z + bias)
    if p >= 1:
        return torch.zeros_like(z) if bias is None else torch.zeros_like(z) + 0 * bias
    ids = np.ascontiguousarray(vertex_ids, dtype=np.int64)
    return ReluDropout.apply(z, bias, ids, float(p), stream_key(seed, step, layer), int(col0))


def vertex_dropout(x: torch.Tensor, vertex_ids: np.ndarray, p: float, seed: int, step: int,
                   layer: int) -> torch.Tensor:
    """Dropout of rows ``x`` (one per vertex id) with the partition-invariant mask."""
    if p <= 0:
        return x
    if p >= 1:
        return torch.zeros_like(x)
    mask = dropout_mask(vertex_ids, x.shape[1], p, seed, step, layer,
                        dtype=np.dtype(str(x.dtype).removeprefix("torch.")).type)
    return x * torch.from_numpy(mask)
