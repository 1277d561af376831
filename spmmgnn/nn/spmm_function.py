"""The distributed SpMM as a differentiable torch operation: ``spmmgnn.nn.spmm(op, x)``
and its transpose ``spmmgnn.nn.spmm_t(op, y)``.

``Z = A X`` (rows of A are targets): forward is ``op.matmul(X)``, backward is
``dL/dX = A^T dL/dZ = op.matmul_t(G)`` -- the third equation of ICPP'24 §2.1. ``W = A^T Y``
is the mirror: forward ``op.matmul_t(Y)``, backward ``dL/dY = A dL/dW = op.matmul(G)`` (what
directed models and bipartite ones such as LightGCN need: both directions of one operator).
Every rank holds its block row of the input and of the output; the operations are
collective, so every rank must call them the same number of times in the same order.
"""

from __future__ import annotations

import torch

from ..algorithms.base import DistSpMM
from ..local.hashing import mix64
from ..runtime.errors import SpmmgnnError


def spmm(op: DistSpMM, x: torch.Tensor, stream: int | None = None) -> torch.Tensor:
    """Collective and differentiable: this rank's rows of ``A @ x``.

    ``x``: this rank's rows of the input (``op.n_local_in`` x f, float32 or float64).
    The backward is ``op.matmul_t``, or ``op.matmul`` when ``op.symmetric`` is True (the same
    product on the faster forward kernel and halo; set it with ``op.probe_symmetry()``).
    ``stream`` keys a codec's stochastic rounding for both directions (give the same value
    for the same call of the same step and a resumed run repeats the uninterrupted one);
    None uses the operator's call counter.
    """
    _check_tensor("spmm", x, "x", "matmul")
    return SpMMFunction.apply(x, op, stream)


def _check_tensor(fn: str, x, name: str, plain: str) -> None:
    """The autograd functions take torch tensors (a numpy array fails deep inside torch)."""
    if not isinstance(x, torch.Tensor):
        raise SpmmgnnError(f"nn.{fn}(op, {name}) takes a torch.Tensor, got "
                           f"{type(x).__module__}.{type(x).__name__}: pass "
                           f"torch.from_numpy({name}), or call op.{plain}({name}) for numpy "
                           "without autograd")


class SpMMFunction(torch.autograd.Function):
    """``A X`` with ``A^T G`` as backward; the backward is skipped when X needs no gradient."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, op: DistSpMM, stream: int | None) -> torch.Tensor:
        ctx.op, ctx.stream = op, stream
        return op.matmul(x.detach().contiguous(), stream=stream)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        if not ctx.needs_input_grad[0]:
            return None, None, None
        if grad.requires_grad:
            raise RuntimeError("spmmgnn.nn.spmm has no double backward (create_graph=True)")
        op, g = ctx.op, grad.contiguous()
        if op.symmetric:  # a stream of its own, not the forward's
            stream = None if ctx.stream is None else mix64(ctx.stream, 0xBAC)
            return op.matmul(g, stream=stream), None, None
        return op.matmul_t(g, stream=ctx.stream), None, None


def spmm_t(op: DistSpMM, y: torch.Tensor, stream: int | None = None) -> torch.Tensor:
    """Collective and differentiable: this rank's rows of ``A.T @ y``.

    ``y``: this rank's rows on the output side of A (``op.n_local`` x f, or a vector); the
    result has ``op.n_local_in`` rows (the input side). The backward is ``op.matmul``.
    When ``op.symmetric`` is True the forward runs ``op.matmul`` (the same product on the
    faster forward kernel). ``stream`` as in ``spmm``.
    """
    _check_tensor("spmm_t", y, "y", "matmul_t")
    return SpMMTFunction.apply(y, op, stream)


class SpMMTFunction(torch.autograd.Function):
    """``A^T Y`` with ``A G`` as backward; the backward is skipped when Y needs no gradient."""

    @staticmethod
    def forward(ctx, y: torch.Tensor, op: DistSpMM, stream: int | None) -> torch.Tensor:
        ctx.op, ctx.stream = op, stream
        y = y.detach().contiguous()
        if op.symmetric:
            return op.matmul(y, stream=None if stream is None else mix64(stream, 0xBAC))
        return op.matmul_t(y, stream=stream)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        if not ctx.needs_input_grad[0]:
            return None, None, None
        if grad.requires_grad:
            raise RuntimeError("spmmgnn.nn.spmm_t has no double backward (create_graph=True)")
        return ctx.op.matmul(grad.contiguous(), stream=ctx.stream), None, None
