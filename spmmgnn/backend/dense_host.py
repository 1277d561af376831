"""The dense operations of a training step on the host backend, as torch autograd functions
over numpy memory: the layers' products ``linear(h, w, b, add)`` = ``h @ w + b + add``
(OpenBLAS and the numba kernels of ``local.dense_kernels``), the vertex-keyed bias + ReLU +
dropout and input dropout (``relu_dropout``, ``vertex_dropout``), the masked cross-entropy
(``MaskedCrossEntropy``), Adam's fused update (``adam_step``) and the evaluation sums.

The products: each on the BLAS and in the layout measured fastest for it.

Measured on this project's 2-core AMD EPYC (``bench/floor.py``, GEMM section; torch's CPU
build ships MKL, numpy ships OpenBLAS): for ``h @ w`` and the input gradient ``g @ w.T``
OpenBLAS writing into a reused output took 0.6x torch's time at 128 columns and 0.14-0.6x at
10; for the weight gradient torch's MKL was fastest when asked for ``(g.T @ h).T`` (10
columns: 12 ms against 120 ms as ``h.T @ g``, the orientation autograd uses) on one thread,
but it does not use a second thread on these tall-skinny shapes (90000 x 128 x 128: 39 ms at
2 threads against OpenBLAS's 19.9; x 10: 14.5 against 4.4), so when the rank has more than
one thread (``threads.get_threads``, which also bounds OpenBLAS) the weight gradient runs on
OpenBLAS too. The choice is fixed per product and thread
count, never timed at run time, so a run's numbers do not depend on timing. The weight
gradient sums over the rows, and OpenBLAS 0.3.31 splits them by its thread count (90000 x
128 x 128, 1003 x 40 x 40: 1 and 2 threads differ in the last bits), so with more than one
thread chosen it is the sum of one panel of rows per chosen thread, each on one OpenBLAS
thread (``weight_grad``): the same bits however many threads busy cores leave to run them.
``h @ w`` and ``g @ w.T`` are split the same way (``panel_matmul``; the bits are those of
the chosen count, since OpenBLAS 0.3.31's float32 rows differ by panel): no OpenBLAS worker
thread runs, so none is left spinning after the call. OpenBLAS's workers spin ~0.1 s after
each threaded call unless $OPENBLAS_THREAD_TIMEOUT was set before numpy loaded (``import
spmmgnn`` first sets it), and spinning they took the cores from the numba kernel after
every product
(``bench/thread_timeout.py``, 90k vertices at 1 x 2: 192-194 ms a step with OpenBLAS's
threads spinning, 115-128 ms with them asleep or with the panels, either way).

Outputs come from ``buffers.recycled_empty`` (the step's memory is reused, not faulted in
again). The sums of a product round as the BLAS does; they differ from torch's ``addmm`` in
the last bits (the bias is added after the product, not before).
"""

from __future__ import annotations

import itertools
import math
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
import torch.nn.functional as F

from ..local import dense_kernels as dk
from ..local.dense_kernels import BIAS_ROWS, stream_key, threshold
from ..local.kernels import SERIAL_WORK
from ..runtime.buffers import recycled_empty
from ..runtime.threads import get_threads, one_blas_thread, running_threads, scope, scoped
from .dense_torch import adam_step as tensor_step


def linear(h: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None,
           add: torch.Tensor | None = None) -> torch.Tensor:
    """``h @ w (+ b) (+ add)``: h (n x a), w (a x c), b (c), add (n x c), float32/64 CPU
    tensors (``Linear``)."""
    return Linear.apply(h, w, b, add)


_panel_pools: dict[int, ThreadPoolExecutor] = {}
PANEL_ROWS = 4096  # fewer rows a chosen thread: one BLAS call (a hand-off costs ~50 us)


def run_panels(t: int, work) -> None:
    """``work(p)`` for each panel p < t: the panels taken in turn by the caller and as many
    helper threads as the running threads allow, each BLAS call on one OpenBLAS thread.
    No OpenBLAS worker thread runs, so none spins after the call (OpenBLAS's idle workers
    spin ~0.1 s unless $OPENBLAS_THREAD_TIMEOUT was set before numpy loaded), and the
    helpers wait on a queue, which takes no core."""
    todo = itertools.count()  # the next panel to take (next() holds the GIL: atomic)

    def drain() -> None:
        while (p := next(todo)) < t:
            work(p)

    helpers = min(t, running_threads()) - 1  # the caller takes panels too
    with scope(limit=1), one_blas_thread():  # one BLAS thread per panel
        pool = _panel_pools.get(helpers) if helpers > 0 else None
        if helpers > 0 and pool is None:
            pool = _panel_pools[helpers] = ThreadPoolExecutor(helpers, "spmmgnn-panel")
        waits = [pool.submit(drain) for _ in range(helpers)]
        drain()
        for w in waits:
            w.result()


def _bounds(rows: int, t: int) -> np.ndarray:
    return np.linspace(0, rows, t + 1).astype(np.int64)


def panel_matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``out = a @ b`` in one panel of rows of ``a`` per chosen thread (``get_threads``),
    each on one OpenBLAS thread (``run_panels``); fewer than ``PANEL_ROWS`` rows a thread:
    one call on one OpenBLAS thread. The bits are fixed by the chosen count, not by the
    cores free to run it (tested): OpenBLAS 0.3.31 gives a float32 row other last bits in
    another panel, and other bits on 2 threads than on 1."""
    t = get_threads()
    if t == 1 or a.shape[0] < PANEL_ROWS * t:
        with one_blas_thread():  # the bits of one thread, whatever the cores
            np.matmul(a, b, out=out)
        return out
    bounds = _bounds(a.shape[0], t)

    def panel(p: int) -> None:
        lo, hi = bounds[p], bounds[p + 1]
        np.matmul(a[lo:hi], b, out=out[lo:hi])

    run_panels(t, panel)
    return out


def weight_grad(g: np.ndarray, h: np.ndarray) -> np.ndarray:
    """``g.T @ h`` as the sum, in order, of one panel of rows per chosen thread
    (``get_threads``), each panel's product on one OpenBLAS thread (``run_panels``).
    OpenBLAS splits this product's inner dimension (the rows) by its thread count, so its
    sums would change with the cores free; the panels are fixed by the chosen count, so the
    sums are too."""
    t = get_threads()
    bounds = _bounds(g.shape[0], t)
    parts = np.empty((t, g.shape[1], h.shape[1]), dtype=g.dtype)

    def panel(p: int) -> None:
        lo, hi = bounds[p], bounds[p + 1]
        np.matmul(g[lo:hi].T, h[lo:hi], out=parts[p])

    run_panels(t, panel)
    out = parts[0]
    for p in range(1, t):
        out += parts[p]
    return out


def _numpy(t: torch.Tensor) -> np.ndarray:
    return t.detach().contiguous().numpy()


class Linear(torch.autograd.Function):
    """Forward ``h @ w`` on OpenBLAS into a recycled array, then ``+ b + add`` in one
    parallel pass; backward: ``g @ w.T`` on OpenBLAS, ``(g.T @ h).T`` on torch's BLAS (on
    OpenBLAS with more than one thread), the bias gradient as torch's column sum."""

    @staticmethod
    def forward(ctx, h, w, b, add):
        with scope(blas=True):  # the library's threads, the caller's back after
            return Linear._forward(ctx, h, w, b, add)

    @staticmethod
    def _forward(ctx, h, w, b, add):
        hn, wn = _numpy(h), _numpy(w)
        out = recycled_empty((hn.shape[0], wn.shape[1]), hn.dtype)
        panel_matmul(hn, wn, out)
        if b is not None or add is not None:
            bn = _numpy(b) if b is not None else np.zeros(0, dtype=out.dtype)
            addn = _numpy(add) if add is not None else np.zeros((0, 0), dtype=out.dtype)
            dk.add_rows(out, bn, addn)
        ctx.save_for_backward(h, w)
        ctx.has_b = b is not None
        return torch.from_numpy(out)

    @staticmethod
    def backward(ctx, grad):
        with scope(blas=True):
            return Linear._backward(ctx, grad)

    @staticmethod
    def _backward(ctx, grad):
        h, w = ctx.saved_tensors
        g = grad.contiguous()
        need_h, need_w, need_b, need_add = ctx.needs_input_grad
        gh = gw = gb = None
        if need_h:
            gn = g.numpy()
            out = recycled_empty((gn.shape[0], w.shape[0]), gn.dtype)
            panel_matmul(gn, _numpy(w).T, out)
            gh = torch.from_numpy(out)
        if need_w and get_threads() > 1:
            gw = torch.from_numpy(weight_grad(g.numpy(), _numpy(h))).t()
        elif need_w:
            gw = torch.mm(g.t(), h.detach()).t()
        if need_b and ctx.has_b:
            gb = g.sum(0)
        return gh, gw, gb, (g if need_add else None)


# ---------------------------------------------------------------- dropout
@scoped
def dropout_mask(vertex_ids: np.ndarray, f: int, p: float, seed: int, step: int, layer: int,
                 dtype=np.float32) -> np.ndarray:
    """``len(vertex_ids) x f`` array holding ``1/(1-p)`` where kept and 0 where dropped."""
    out = np.empty((vertex_ids.shape[0], f), dtype=dtype)
    if p <= 0:
        out.fill(1)
        return out
    ids = np.ascontiguousarray(vertex_ids, dtype=np.int64)
    dk.mask_kernel(stream_key(seed, step, layer), ids, f, threshold(p),
                   dtype(1.0 / (1.0 - p)), out)
    return out


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
        dk.relu_dropout_kernel(zn, bn, key, vertex_ids, col0, threshold(p), scale, out)
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
            dk.relu_dropout_backward_kernel(out.numpy(), g, ctx.scale, grad_in)
            return torch.from_numpy(grad_in), None, None, None, None, None
        partial = np.empty((-(-g.shape[0] // BIAS_ROWS), g.shape[1]), dtype=g.dtype)
        dk.relu_dropout_bias_backward_kernel(out.numpy(), g, ctx.scale, grad_in, partial)
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


# ---------------------------------------------------------------- loss
def rows_loss_sum(logits: torch.Tensor, labels: torch.Tensor,
                  idx: torch.Tensor) -> torch.Tensor:
    """``masked_loss_sum`` over the rows ``idx`` (the mask's indices, computed once by the
    trainer: finding them in a 1M-row mask took 15-24 ms of every step on 16 threads)."""
    if logits.dim() != 2 or not logits.dtype.is_floating_point:
        return F.cross_entropy(logits.index_select(0, idx), labels.index_select(0, idx),
                               reduction="sum")
    return MaskedCrossEntropy.apply(logits, labels, idx)


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
        dk.ce_forward(z, y, rows, lse, terms)
        ctx.save_for_backward(logits, labels, idx)
        ctx.lse = lse
        return torch.tensor(terms.sum(), dtype=logits.dtype)

    @staticmethod
    def backward(ctx, grad):
        logits, labels, idx = ctx.saved_tensors
        z = logits.detach().contiguous().numpy()
        out = np.empty_like(z)
        dk.ce_backward(z, labels.numpy().astype(np.int64, copy=False),
                       idx.numpy().astype(np.int64, copy=False), ctx.lse, float(grad), out)
        return torch.from_numpy(out), None, None


def evaluation_sums(logits: torch.Tensor, labels: torch.Tensor, rows: list) -> np.ndarray:
    """Per split (its rows' indices in ``rows``), the loss sum (float64) and the number of
    correct predictions of this rank's rows: float64, two per split."""
    out = np.zeros(2 * len(rows), dtype=np.float64)
    pred = logits.argmax(dim=1)
    z = logits.double()
    for i, idx in enumerate(rows):
        if idx.numel():
            out[2 * i] = float(rows_loss_sum(z, labels, idx))
            out[2 * i + 1] = float((pred.index_select(0, idx) == labels.index_select(0, idx))
                                   .sum())
    return out


# ---------------------------------------------------------------- Adam
def fusable(p: torch.Tensor, grad: torch.Tensor, st: dict) -> bool:
    """The fused pass applies: float32/64 CPU tensors, every array contiguous and of p's
    type."""
    arrays = (p, grad, st["exp_avg"], st["exp_avg_sq"])
    return (p.dtype in (torch.float32, torch.float64) and p.device.type == "cpu"
            and all(x.is_contiguous() and x.dtype == p.dtype and x.shape == p.shape
                    for x in arrays))


def adam_step(p: torch.Tensor, grad: torch.Tensor, st: dict, lr: float, betas, eps: float,
              wd: float) -> None:
    """One Adam step of parameter ``p`` (``st``: its step counter, already advanced, and
    moments): one fused numba pass (``dense_kernels.adam_kernel``, or its serial twin below
    ``SERIAL_WORK`` elements), or torch's tensor operations when the arrays do not allow it
    (``dense_torch.adam_step``)."""
    if not fusable(p, grad, st):
        tensor_step(p, grad, st, lr, betas, eps, wd)
        return
    beta1, beta2 = betas
    step = float(st["step"])
    kernel = dk.adam_kernel if p.numel() >= SERIAL_WORK else dk.adam_serial
    kernel(*(x.detach().numpy().reshape(-1) for x in (p, grad, st["exp_avg"],
                                                       st["exp_avg_sq"])),
           *(np.dtype(str(p.dtype).removeprefix("torch.")).type(v) for v in
             (1 - beta1, beta2, 1 - beta2, wd, eps, math.sqrt(1 - beta2 ** step),
              lr / (1 - beta1 ** step))))
