"""Bias + ReLU + dropout in one pass (``nn.dropout.relu_dropout(..., bias=)``): the unfused
ops' values and gradients, and bit for bit the same on 1 and 2 threads."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from spmmgnn.nn.dropout import BIAS_ROWS, relu_dropout, vertex_dropout
from spmmgnn.runtime.threads import get_threads, set_threads


def _case(rows: int, dtype=torch.float64):
    gen = torch.Generator().manual_seed(rows)
    z = torch.randn(rows, 7, dtype=dtype, generator=gen).requires_grad_()
    b = torch.randn(7, dtype=dtype, generator=gen).requires_grad_()
    up = torch.randn(rows, 7, dtype=dtype, generator=gen)
    ids = np.arange(rows, dtype=np.int64) * 3 + 1
    return z, b, up, ids


def _fused(z, b, up, ids, threads: int | None = None):
    before = get_threads()
    if threads:
        set_threads(threads)
    try:
        out = relu_dropout(z, ids, 0.4, seed=2, step=5, layer=1, bias=b)
        grads = torch.autograd.grad((out * up).sum(), [z, b])
    finally:
        set_threads(before)
    return out.detach().clone(), [g.clone() for g in grads]


@pytest.mark.parametrize("rows", [0, 1, 300, 3 * BIAS_ROWS + 17])
def test_fused_bias_is_the_unfused_ops(rows):
    z, b, up, ids = _case(rows)
    out, (gz, gb) = _fused(z, b, up, ids)
    ref = vertex_dropout(torch.relu(z + b), ids, 0.4, seed=2, step=5, layer=1)
    rz, rb = torch.autograd.grad((ref * up).sum(), [z, b])
    assert torch.equal(out, ref.detach())           # z + b rounds once either way
    assert torch.equal(gz, rz)
    torch.testing.assert_close(gb, rb, rtol=1e-12, atol=1e-12)   # summed in blocks


def test_fused_bias_does_not_depend_on_the_threads():
    z, b, up, ids = _case(5 * BIAS_ROWS + 3, torch.float32)
    one, (gz1, gb1) = _fused(z, b, up, ids, threads=1)
    two, (gz2, gb2) = _fused(z, b, up, ids, threads=2)
    assert torch.equal(one, two) and torch.equal(gz1, gz2) and torch.equal(gb1, gb2)
