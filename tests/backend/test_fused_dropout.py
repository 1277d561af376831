"""The fused bias + ReLU + dropout pass (``spmmgnn.backend.fused``): both implementations
against a plain-torch reference, forward and gradient, and the masks' properties (fixed by
the seed, step, layer, vertex id and column; independent of the row order; keeping 1 - p).

Each test runs on the torch implementation and on the Triton kernels where they run: on CUDA
(``-m gpu``), and on CPU tensors under Triton's interpreter, which
``test_triton_interpreter_runs_this_file`` turns on for a run of this file in a subprocess
(Triton installs from PyPI with the CPU torch: the ``test`` extra)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from spmmgnn.backend import fused
from spmmgnn.local.hashing import mix64

HAS_CUDA = torch.cuda.is_available()
INTERPRETED = fused.triton_runs_on(torch.device("cpu"))

WHERE = [
    pytest.param(("cpu", "torch"), id="cpu-torch"),
    pytest.param(("cpu", "triton"), id="cpu-triton", marks=pytest.mark.skipif(
        not INTERPRETED, reason="Triton's interpreter is off (TRITON_INTERPRET=1 runs it)")),
    pytest.param(("cuda", "triton"), id="cuda-triton", marks=[
        pytest.mark.gpu, pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")]),
    pytest.param(("cuda", "torch"), id="cuda-torch", marks=[
        pytest.mark.gpu, pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")]),
]


@pytest.fixture(params=WHERE)
def where(request):
    return request.param


def rows(n: int, f: int, dtype=torch.float32, device="cpu", seed: int = 0):
    """z (n x f, values away from 0 so that a finite difference never crosses the kink),
    a bias, and scattered global ids (some above 2**32)."""
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(n, f, generator=g, dtype=torch.float64)
    z = z + torch.sign(z) * 0.05
    b = torch.randn(f, generator=g, dtype=torch.float64) * 0.01
    ids = torch.randperm(50 * n, generator=g)[:n] * 7919 + 3
    ids[: n // 4] += 2**33
    return z.to(dtype).to(device), b.to(dtype).to(device), ids.to(device)


def run(where, z, b, ids, p=0.5, seed=1, step=2, layer=1, **kw):
    device, impl = where
    return fused.bias_relu_dropout(z, b, ids, p, seed, step, layer, impl=impl, **kw)


def reference(z, b, ids, p=0.5, seed=1, step=2, layer=1):
    """relu(z + b) * mask / (1 - p), by autograd's own operations."""
    keep = fused.keep_mask(ids, z.shape[1], p, seed, step, layer).to(z.device)
    scale = torch.full((1,), 1 / (1 - p), dtype=z.dtype, device=z.device)
    return torch.relu(z + b) * keep.to(z.dtype) * scale


# ------------------------------------------------------------------ values and gradients
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_forward_and_gradients_equal_the_reference(where, dtype):
    z, b, ids = rows(300, 40, dtype, where[0])
    z1, b1 = z.clone().requires_grad_(), b.clone().requires_grad_()
    z2, b2 = z.clone().requires_grad_(), b.clone().requires_grad_()
    out, ref = run(where, z1, b1, ids), reference(z2, b2, ids)
    assert torch.equal(out, ref)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(5),
                    dtype=dtype).to(where[0])
    out.backward(g)
    ref.backward(g)
    assert torch.equal(z1.grad, z2.grad)
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(b1.grad, b2.grad, rtol=tol, atol=tol)
    assert 0.4 < (out > 0).double().mean() / (z + b > 0).double().mean() < 0.6


def test_gradcheck_float64(where):
    z, b, ids = rows(40, 12, torch.float64, where[0])
    z.requires_grad_()
    b.requires_grad_()
    # fast mode: a few random directions, not a column of the Jacobian per input
    assert torch.autograd.gradcheck(lambda z, b: run(where, z, b, ids, p=0.3), (z, b),
                                    eps=1e-6, atol=1e-8, fast_mode=True)


def test_without_bias_and_only_bias_needing_gradient(where):
    z, b, ids = rows(100, 9, device=where[0])
    assert torch.equal(run(where, z, None, ids), reference(z, torch.zeros_like(b), ids))
    b1 = b.clone().requires_grad_()
    run(where, z, b1, ids).sum().backward()
    b2 = b.clone().requires_grad_()
    reference(z, b2, ids).sum().backward()
    torch.testing.assert_close(b1.grad, b2.grad)


@pytest.mark.parametrize("device", [p for p in WHERE if p.values[0][1] == "triton"])
def test_triton_equals_torch_bit_for_bit(device):
    """The two implementations draw the same masks and compute the same values."""
    z, b, ids = rows(513, 200, device=device[0])  # tiles cut rows and columns
    outs, grads = [], []
    for impl in ("triton", "torch"):
        zz = z.clone().requires_grad_()
        out = fused.bias_relu_dropout(zz, b, ids, 0.37, 9, 11, 2, col0=5, impl=impl)
        out.backward(torch.ones_like(out))
        outs.append(out.detach())
        grads.append(zz.grad)
    assert torch.equal(*outs) and torch.equal(*grads)


# ------------------------------------------------------------------ the masks
def mix32(x: int) -> int:
    x ^= x >> 16
    x = x * 0x7FEB352D & 0xFFFFFFFF
    x ^= x >> 15
    x = x * 0x846CA68B & 0xFFFFFFFF
    return x ^ (x >> 16)


def test_mask_is_the_documented_hash():
    """Python integers, one entry at a time, give the module's masks (the formula of its
    docstring: the masks are pinned, not only self-consistent)."""
    ids = [0, 1, 77, 2**32 + 5, 2**40 + 3, 2**62 + 17]
    p, seed, step, layer, col0, f = 0.3, 4, 7, 1, 3, 6
    key = mix64(seed, step, layer)
    k0, k1 = key & 0xFFFFFFFF, key >> 32
    want = [[mix32(mix32(mix32((v & 0xFFFFFFFF) ^ k0) ^ (v >> 32) ^ k1)
                   ^ mix32(((col0 + k) * 0x9E3779B9 & 0xFFFFFFFF) ^ k1)) >> 8
             >= round(p * 2**24) for k in range(f)] for v in ids]
    got = fused.keep_mask(torch.tensor(ids), f, p, seed, step, layer, col0=col0)
    assert got.tolist() == want


def test_fixed_seeds_give_fixed_masks(where):
    z, b, ids = rows(200, 32, device=where[0])
    base = run(where, z, b, ids)
    assert torch.equal(base, run(where, z, b, ids))
    for change in (dict(step=3), dict(layer=2), dict(seed=2)):
        other = run(where, z, b, ids, **change)
        differ = ((base > 0) != (other > 0)).double().mean()
        # independent masks differ where one keeps and the other drops: about half of the
        # positive entries' 2 p (1 - p)
        assert 0.15 < differ < 0.35, (change, differ)


def test_masks_follow_the_vertex_not_the_row(where):
    """Permuting the rows (another partition's order) permutes the output; a block of the
    columns (``col0``) gets that block of the full mask."""
    z, b, ids = rows(257, 30, device=where[0])
    perm = torch.randperm(257, generator=torch.Generator().manual_seed(3)).to(where[0])
    full = run(where, z, b, ids)
    assert torch.equal(run(where, z[perm], b, ids[perm]), full[perm])
    part = run(where, z[:, 10:25].contiguous(), b[10:25], ids, col0=10)
    assert torch.equal(part, full[:, 10:25])
    assert torch.equal(run(where, z[100:], b, ids[100:]), full[100:])


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_keeps_one_minus_p_within_binomial_bounds(where, p):
    n, f = 512, 128
    z = torch.ones(n, f, device=where[0])
    ids = torch.arange(n, device=where[0]) * 3 + 11
    kept = run(where, z, None, ids, p=p, seed=7) > 0
    N = n * f
    assert abs(int(kept.sum()) - (1 - p) * N) <= 6 * (N * p * (1 - p)) ** 0.5, (kept, N)
    # and per column (no column is kept much more often than another)
    cols = kept.double().mean(0)
    assert float((cols - (1 - p)).abs().max()) <= 6 * (p * (1 - p) / n) ** 0.5


# ------------------------------------------------------------------ edges
def test_p_zero_and_eval_are_relu_of_z_plus_bias(where):
    z, b, ids = rows(64, 8, device=where[0])
    want = torch.relu(z + b)
    assert torch.equal(run(where, z, b, ids, p=0.0), want)
    assert torch.equal(run(where, z, b, ids, p=0.5, training=False), want)
    zz = z.clone().requires_grad_()
    run(where, zz, b, ids, p=0.5, training=False).sum().backward()
    assert torch.equal(zz.grad, (z + b > 0).to(z.dtype))


def test_p_one_drops_everything(where):
    z, b, ids = rows(64, 8, device=where[0])
    z[0, 0] = float("nan")
    zz = z.clone().requires_grad_()
    out = run(where, zz, b, ids, p=1.0)
    assert torch.isnan(out[0, 0]) and not out.flatten()[1:].any()
    out.sum().backward()
    assert not zz.grad.any()


def test_nan_stays_nan_and_a_dropped_inf_is_zero(where):
    n, f = 64, 16
    ids = torch.arange(n, device=where[0])
    keep = fused.keep_mask(ids, f, 0.5, 1, 2, 1).to(where[0])
    for value in (float("nan"), float("inf"), -float("inf")):
        z = torch.full((n, f), value, device=where[0])
        out = run(where, z, None, ids)
        if value != value:
            assert torch.isnan(out).all()
        elif value > 0:
            assert torch.equal(out, torch.where(keep, torch.full_like(z, float("inf")),
                                                torch.zeros_like(z)))
        else:
            assert not out.any()


def test_bad_arguments_are_clear_errors():
    z, b, ids = rows(10, 4)
    with pytest.raises(ValueError, match="probability"):
        fused.bias_relu_dropout(z, b, ids, 1.5, 0, 0, 0)
    with pytest.raises(ValueError, match="9 vertex ids for 10 rows"):
        fused.bias_relu_dropout(z, b, ids[:9], 0.5, 0, 0, 0)
    with pytest.raises(ValueError, match="bias"):
        fused.bias_relu_dropout(z, b.double(), ids, 0.5, 0, 0, 0)
    with pytest.raises(ValueError, match="float32 or float64"):
        fused.bias_relu_dropout(z.half(), None, ids, 0.5, 0, 0, 0)
    if not INTERPRETED:
        with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
            fused.bias_relu_dropout(z, b, ids, 0.5, 0, 0, 0, impl="triton")


def test_numpy_ids_and_empty_rows(where):
    z, b, ids = rows(30, 5, device=where[0])
    assert torch.equal(run(where, z, b, ids.cpu().numpy()), run(where, z, b, ids))
    empty = run(where, z[:0], b, ids[:0])
    assert empty.shape == (0, 5)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_cuda_kernels_equal_the_cpu_torch_masks():
    """The masks CUDA draws are the CPU's (portable runs), at a size with many tiles."""
    z, b, ids = rows(20000, 128)
    cpu = fused.bias_relu_dropout(z, b, ids, 0.5, 3, 4, 1, impl="torch")
    cuda = fused.bias_relu_dropout(z.cuda(), b.cuda(), ids.cuda(), 0.5, 3, 4, 1)
    assert torch.equal(cuda.cpu(), cpu)


def test_triton_interpreter_runs_this_file():
    """This file under ``TRITON_INTERPRET=1``: the Triton kernels on CPU tensors pass every
    test the torch implementation passes."""
    pytest.importorskip("triton")
    if INTERPRETED:
        pytest.skip("this run is the interpreter's")
    here = Path(__file__)
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-m", "not gpu", "-k", "not interpreter_runs", str(here)],
                          capture_output=True, text=True, env=env, timeout=600,
                          cwd=here.parents[2])
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    summary = proc.stdout.strip().splitlines()[-1]
    assert "skipped" not in summary and " passed" in summary, summary
