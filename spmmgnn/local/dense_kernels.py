"""The numba kernels of a training step's dense operations on the host: the rows' bias and
addend (``add_rows``), the vertex-keyed dropout (``mask_kernel``, ``relu_dropout_*``: a
splitmix64 of (key, vertex id, feature) decides each entry, so a run drops the same entries
on any number of ranks), Adam's fused update (``adam_kernel`` and its serial twin) and the
masked cross-entropy (``ce_forward`` / ``ce_backward``). ``backend.dense_host`` wraps them
as torch autograd functions; nothing here knows torch.
"""

from __future__ import annotations

import numpy as np
from numba import prange, uint64

from ..runtime.jit import eager_njit, real
from . import hashing
from .hashing import keep_threshold, mix64

splitmix64 = real(hashing.splitmix64)  # eager numba kernels below call it
BIAS_ROWS = 1024  # rows per partial sum of the bias gradient: fixed, so not set by threads


def stream_key(seed: int, step: int, layer: int) -> np.uint64:
    """The 64-bit key of one dropout site (seed, training step, layer)."""
    return np.uint64(mix64(seed, step, layer))


def threshold(p: float) -> np.uint64:
    """The 24-bit cut a hash's top bits must reach for its entry to be kept."""
    return np.uint64(keep_threshold(p))


@eager_njit(parallel=True, cache=True, nogil=True, boundscheck=False)
def add_rows(out, b, add):
    """out[i] = (out[i] + b) + add[i] in one pass (b or add empty: left out)."""
    f = out.shape[1]
    with_b, with_add = b.shape[0] > 0, add.shape[0] > 0
    for i in prange(out.shape[0]):
        for t in range(f):
            v = out[i, t]
            if with_b:
                v += b[t]
            if with_add:
                v += add[i, t]
            out[i, t] = v


@eager_njit(parallel=True, cache=True, nogil=True, boundscheck=False)
def mask_kernel(key, vertex_ids, f, threshold, scale, out):
    """out[i, k] = ``scale`` where entry (vertex_ids[i], k) is kept, else 0."""
    for i in prange(vertex_ids.shape[0]):
        base = splitmix64(key ^ (uint64(vertex_ids[i]) * uint64(0x9E3779B97F4A7C15)))
        for k in range(f):
            h = splitmix64(base + uint64(k) * uint64(0xD1B54A32D192ED03))
            out[i, k] = scale if (h >> uint64(40)) >= threshold else 0.0


@eager_njit(parallel=True, cache=True, nogil=True, boundscheck=False)
def relu_dropout_kernel(z, bias, key, vertex_ids, col0, threshold, scale, out):
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
def relu_dropout_backward_kernel(out, grad, scale, grad_in):
    """d out / d z is ``scale`` exactly where out > 0 (kept and z > 0), else 0."""
    f = out.shape[1]
    for i in prange(out.shape[0]):
        for k in range(f):
            grad_in[i, k] = grad[i, k] * scale if out[i, k] > 0 else 0.0


@eager_njit(parallel=True, cache=True, nogil=True, boundscheck=False)
def relu_dropout_bias_backward_kernel(out, grad, scale, grad_in, partial):
    """``relu_dropout_backward_kernel`` plus each block of ``BIAS_ROWS`` rows' column sums
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


@eager_njit(inline="always", cache=True, nogil=True, boundscheck=False)
def adam_element(i, p, g, m, v, one_b1, b2, one_b2, wd, eps, bc2_sqrt, step_size):
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
def adam_kernel(p, g, m, v, one_b1, b2, one_b2, wd, eps, bc2_sqrt, step_size):
    """One Adam step over every element (``adam_element``), in parallel."""
    for i in prange(p.shape[0]):
        adam_element(i, p, g, m, v, one_b1, b2, one_b2, wd, eps, bc2_sqrt, step_size)


@eager_njit(cache=True, nogil=True, boundscheck=False)
def adam_serial(p, g, m, v, one_b1, b2, one_b2, wd, eps, bc2_sqrt, step_size):
    """The serial twin of ``adam_kernel``, for parameters below ``kernels.SERIAL_WORK``
    elements (a GCN's weights and biases: waking the threads for a few thousand elements
    costs more than the update, 0.49 against 0.12 ms a step at 2 threads)."""
    for i in range(p.shape[0]):
        adam_element(i, p, g, m, v, one_b1, b2, one_b2, wd, eps, bc2_sqrt, step_size)


@eager_njit(parallel=True, cache=True, nogil=True, boundscheck=False)
def ce_forward(z, y, rows, lse, terms):
    """Per selected row: its logsumexp (``lse``) and its cross-entropy term (float64)."""
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
def ce_backward(z, y, rows, lse, g, out):
    """``out`` = g (softmax(z_i) - onehot(y_i)) on the selected rows, 0 elsewhere."""
    n, c = z.shape
    for i in prange(n):
        for k in range(c):
            out[i, k] = 0.0
    for t in prange(rows.size):
        i = rows[t]
        for k in range(c):
            out[i, k] = g * np.exp(float(z[i, k]) - lse[t])
        out[i, y[i]] -= g
