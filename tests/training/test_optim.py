"""The fused Adam (spmmgnn.training.optim): torch.optim.Adam's numbers to rounding over
steps, bit for bit the same at 1 and 2 threads, the tensor path where the fused one does
not apply."""

from __future__ import annotations

import pytest
import torch

from spmmgnn.runtime.threads import get_threads, set_threads
from spmmgnn.training.optim import Adam

# a weight below kernels.SERIAL_WORK elements (the serial twin) and one above (parallel)
SMALL, LARGE = (37, 5), (300, 230)


def _run(make_opt, dtype, steps: int = 6, wd: float = 5e-4, threads: int | None = None,
         shape=SMALL):
    gen = torch.Generator().manual_seed(3)
    params = [torch.randn(*shape, dtype=dtype, generator=gen).requires_grad_(),
              torch.randn(5, dtype=dtype, generator=gen).requires_grad_()]
    grads = [[torch.randn(p.shape, dtype=dtype, generator=gen) for p in params]
             for _ in range(steps)]
    opt = make_opt(params, lr=0.01, weight_decay=wd)
    before = get_threads()
    if threads:
        set_threads(threads)
    try:
        for g in grads:
            for p, gi in zip(params, g, strict=True):
                p.grad = gi.clone()
            opt.step()
    finally:
        set_threads(before)
    return [p.detach().clone() for p in params], opt


@pytest.mark.parametrize("shape", [SMALL, LARGE])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("wd", [0.0, 5e-4])
def test_fused_adam_is_torchs_to_rounding(dtype, wd, shape):
    got, opt = _run(Adam, dtype, wd=wd, shape=shape)
    want, ref = _run(torch.optim.Adam, dtype, wd=wd, shape=shape)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-12,
                                                                         atol=1e-13)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, **tol)
    for i, st in opt.state.items():   # the moments too, in torch's layout
        for key in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(st[key], ref.state[ref.param_groups[0]["params"][i]][key],
                                       **tol)


def test_fused_adam_does_not_depend_on_the_threads():
    for shape in (SMALL, LARGE):
        one, _ = _run(Adam, torch.float32, threads=1, shape=shape)
        two, _ = _run(Adam, torch.float32, threads=2, shape=shape)
        assert all(torch.equal(a, b) for a, b in zip(one, two, strict=True))


def test_the_serial_twin_is_the_parallel_kernel_bit_for_bit():
    import numpy as np

    from spmmgnn.local.kernels import SERIAL_WORK
    from spmmgnn.training.optim import _adam_kernel, _adam_serial

    assert SMALL[0] * SMALL[1] < SERIAL_WORK <= LARGE[0] * LARGE[1]
    rng = np.random.default_rng(1)
    for dtype in (np.float32, np.float64):
        arrays = [rng.standard_normal(LARGE[0] * LARGE[1]).astype(dtype) for _ in range(4)]
        arrays[3] = np.abs(arrays[3])  # the second moment
        scalars = [dtype(v) for v in (0.1, 0.999, 0.001, 5e-4, 1e-8, 0.05, 0.02)]
        a, b = [x.copy() for x in arrays], [x.copy() for x in arrays]
        _adam_kernel(*a, *scalars)
        _adam_serial(*b, *scalars)
        assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
        assert not np.array_equal(a[0], arrays[0])  # it did update


def test_a_non_contiguous_parameter_takes_the_tensor_path():
    w = torch.randn(6, 4, dtype=torch.float64).t().requires_grad_()   # not contiguous
    ref = w.detach().clone().requires_grad_()
    ours, theirs = Adam([w], lr=0.1), torch.optim.Adam([ref], lr=0.1)
    for _ in range(3):
        w.grad = torch.ones_like(w)
        ref.grad = torch.ones_like(ref)
        ours.step()
        theirs.step()
    torch.testing.assert_close(w, ref, rtol=1e-12, atol=1e-13)
