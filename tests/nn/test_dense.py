"""The layers' dense products (``nn.linear``) and the step's array recycler (``buffers``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from spmmgnn.nn.linear import linear
from spmmgnn.runtime.buffers import RECYCLE_MIN_BYTES, Recycler


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def rank_threads(request):
    """The weight gradient runs on torch's BLAS on one thread and on OpenBLAS on more."""
    from spmmgnn.runtime.threads import get_threads, set_threads

    before = get_threads()
    set_threads(request.param)
    yield request.param
    set_threads(before)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("rows", [0, 1, 37, 2000])
def test_linear_values_and_gradients_are_torchs(dtype, rows, rank_threads):
    """h @ w + b + add and the gradients of all four, against torch's addmm, for every
    combination of bias / added term / which inputs need a gradient, on 1 and 2 threads."""
    gen = torch.Generator().manual_seed(rows)
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else dict(rtol=1e-12,
                                                                          atol=1e-12)
    for with_b in (False, True):
        for with_add in (False, True):
            for h_grad in (False, True):
                h = torch.randn(rows, 9, dtype=dtype, generator=gen).requires_grad_(h_grad)
                w = torch.randn(9, 4, dtype=dtype, generator=gen).requires_grad_(True)
                b = torch.randn(4, dtype=dtype, generator=gen).requires_grad_(True) \
                    if with_b else None
                add = torch.randn(rows, 4, dtype=dtype, generator=gen).requires_grad_(True) \
                    if with_add else None
                leaves = [t for t in (h, w, b, add) if t is not None and t.requires_grad]
                up = torch.randn(rows, 4, dtype=dtype, generator=gen)
                got = linear(h, w, b, add)
                grads = torch.autograd.grad((got * up).sum(), leaves, allow_unused=True)
                want = h @ w
                if b is not None:
                    want = want + b
                if add is not None:
                    want = want + add
                ref = torch.autograd.grad((want * up).sum(), leaves, allow_unused=True)
                torch.testing.assert_close(got, want, **tol)
                for g, r in zip(grads, ref, strict=True):
                    torch.testing.assert_close(g, r, **tol)


def test_linear_gradcheck():
    args = [torch.randn(6, 4, dtype=torch.float64, requires_grad=True),
            torch.randn(4, 3, dtype=torch.float64, requires_grad=True),
            torch.randn(3, dtype=torch.float64, requires_grad=True),
            torch.randn(6, 3, dtype=torch.float64, requires_grad=True)]
    assert torch.autograd.gradcheck(linear, args)


def test_recycler_reuses_only_arrays_nobody_references():
    r = Recycler()
    shape = (RECYCLE_MIN_BYTES // 8 + 1, 2)
    a = r.empty(shape, np.float32)
    held = torch.from_numpy(a)        # a tensor over it: not free
    del a
    b = r.empty(shape, np.float32)
    assert b.ctypes.data != held.data_ptr()
    view = b[3:]                      # a view keeps b in use
    del b
    c = r.empty(shape, np.float32)
    assert c.ctypes.data not in (held.data_ptr(), view.base.ctypes.data)
    freed = held.data_ptr()
    del held                          # the tensor (and so the array under it) is gone
    d = r.empty(shape, np.float32)
    assert d.ctypes.data == freed     # handed out again
    assert r.empty((4, 4), np.float32).nbytes == 64  # small arrays are plain np.empty
    assert r.nbytes() == 3 * np.empty(shape, np.float32).nbytes
    r.clear()
    assert r.nbytes() == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_masked_loss_sum_is_cross_entropys(dtype):
    """The fused masked cross-entropy against torch's (value and gradient), with empty and
    full masks, and NaN logits giving a NaN loss (the divergence check relies on it)."""
    from spmmgnn.training.metrics import masked_loss_sum

    gen = torch.Generator().manual_seed(3)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else {}
    for n in (0, 1, 500):
        z = (5 * torch.randn(n, 7, dtype=dtype, generator=gen)).requires_grad_(True)
        y = torch.randint(0, 7, (n,), generator=gen)
        for mask in (torch.rand(n, generator=gen) < 0.6, torch.ones(n, dtype=torch.bool),
                     torch.zeros(n, dtype=torch.bool)):
            got = masked_loss_sum(z, y, mask)
            (g_got,) = torch.autograd.grad(0.3 * got, z)
            want = torch.nn.functional.cross_entropy(z[mask], y[mask], reduction="sum")
            (g_want,) = torch.autograd.grad(0.3 * want, z)
            torch.testing.assert_close(got, want, **tol)
            torch.testing.assert_close(g_got, g_want, **tol)
    z = torch.zeros(3, 4, dtype=dtype)
    z[1, 2] = float("nan")
    assert torch.isnan(masked_loss_sum(z, torch.zeros(3, dtype=torch.long),
                                       torch.ones(3, dtype=torch.bool)))
