"""The layers' dense products as one differentiable operation: ``linear(h, w, b, add)`` =
``h @ w + b + add``, each product on the BLAS and in the layout measured fastest for it.

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
``h @ w`` and ``g @ w.T`` are split the same way (``panel_matmul``; a row's bits do not
depend on its panel): no OpenBLAS worker thread runs, so none is left spinning after the
call. OpenBLAS's workers spin ~0.1 s after each threaded call unless
$OPENBLAS_THREAD_TIMEOUT was set when numpy loaded (``spmmgnn.runtime.thread_env``: it is, when
``import spmmgnn`` loads numpy), and spinning they took the cores from the numba kernel
after every product (issue 48: ``bench/thread_timeout.py``, 90k vertices at 1 x 2:
192-194 ms a step with OpenBLAS's threads spinning, 115-128 ms with them asleep or with the
panels, either way).

Outputs come from ``buffers.recycled_empty`` (the step's memory is reused, not faulted in
again). The sums of a product round as the BLAS does; they differ from torch's ``addmm`` in
the last bits (the bias is added after the product, not before).
"""

from __future__ import annotations

import itertools
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
from numba import prange

from ..runtime.buffers import recycled_empty
from ..runtime.jit import eager_njit
from ..runtime.threads import get_threads, running_threads, scope


def linear(h: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None,
           add: torch.Tensor | None = None, on_device: bool = False) -> torch.Tensor:
    """``h @ w (+ b) (+ add)``: h (n x a), w (a x c), b (c), add (n x c), float32/64.
    ``on_device`` (a device grid's layers; any tensor off the CPU): ``linear_torch``."""
    if on_device or h.device.type != "cpu":
        return linear_torch(h, w, b, add)
    return Linear.apply(h, w, b, add)


def linear_torch(h: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None,
                 add: torch.Tensor | None = None) -> torch.Tensor:
    """``linear`` by torch's own products on the tensors' device (autograd's backward):
    the path of device grids, the same functions on ``device="cpu"`` as on CUDA."""
    out = torch.addmm(b, h, w) if b is not None else h @ w
    return out if add is None else out + add


@eager_njit(parallel=True, cache=True, nogil=True, boundscheck=False)
def _add_rows(out, b, add):
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
    with scope(limit=1, blas=True):  # one BLAS thread per panel
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
    one call. A row's result does not depend on the panel holding it (tested)."""
    t = get_threads()
    if t == 1 or a.shape[0] < PANEL_ROWS * t:
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
            _add_rows(out, bn, addn)
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
