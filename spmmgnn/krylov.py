"""Krylov and subspace methods on a distributed operator: ``cg``, ``subspace_iteration`` and
a scipy ``LinearOperator`` view at P = 1.

Every vector is this rank's rows (like ``op.matmul``'s input), and every reduction goes
through the operator (``op.dot``, ``op.norm``, ``op.gram``, ``op.qr``), which counts each row
once on any grid (1D, 1.5D replicas, 2D, 3D) and hands every rank the same bits: all ranks
take the same steps and stop together. A scipy solver cannot be handed the operator at
P > 1 instead: its dot products would sum this rank's rows only, each rank would iterate on
different numbers and the collective products would hang or return wrong results.

Both methods need a square A whose two sides share one layout (the default for a square A),
and a symmetric A (``op.symmetric``, probed once with ``op.probe_symmetry()`` when unknown).
Computations run in float64; results come back in the input's kind and dtype.

They run on any grid: the vectors are the operator's kind (numpy arrays on a grid without
a device, tensors on its device with one: ``op.backend``), and the few numbers per column
the iterations steer by (step lengths, residuals, Ritz values) are read on the host, where
every rank holds the same bits; on a device those small copies count as the ``device_host``
tier of ``op.stats``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .backend.device import device_error
from .local.hashing import uniform_by_id
from .runtime.errors import SpmmgnnError, agree, collective_error

RAYLEIGH_RITZ_EVERY = 5  # subspace iterations between two Rayleigh-Ritz rotations


@dataclass(frozen=True)
class SolveInfo:
    """How an iteration ended: ``iterations`` taken, the final ``residual`` (cg: the largest
    relative residual ||b - A x|| / ||b|| over the columns; subspace_iteration: the largest
    ||A q - theta q|| / max |theta|), and whether it ``converged`` to ``tol``."""

    iterations: int
    residual: float
    converged: bool


def _square_symmetric(op, what: str) -> None:
    """One error on every rank unless A is square with one layout and symmetric (every
    rank decides from the same layouts, or from the probe's all-reduced verdict)."""
    same = (op.m == op.n and (op.partition is op.col_partition or (
        np.array_equal(op.row_offsets, op.col_offsets)
        and op.partition.same_order(op.col_partition))))
    if not same:
        raise collective_error(
            f"{what}: needs a square A whose rows and columns share one layout, got "
            f"{op.m} x {op.n}" + ("" if op.m != op.n else " with two layouts (build it "
                                  "without col_partition=)"))
    if op.symmetric is None:
        op.probe_symmetry()
    if not op.symmetric:
        raise collective_error(f"{what}: A is not symmetric (A.T != A, op.probe_symmetry()); "
                               f"{what} needs a symmetric A")


class _Host:
    """The f numbers per column an iteration steers by, to the host and back (on a torch
    backend counted as ``device_host`` with the operator's statistics)."""

    def __init__(self, op):
        self.backend, self.stats = op.backend, op.stats

    def __call__(self, v) -> np.ndarray:
        return self.backend.to_host(v, self.stats)

    def back(self, v: np.ndarray):
        return self.backend.from_host(v, self.stats)


def _as_float64(op, x, what: str):
    """(x as the operator's float64 array, 2-D), whether it was a 1-D vector, its dtype:
    data where the grid keeps it (refused on every rank otherwise), never copied across
    devices."""
    be = op.backend
    error = device_error(x, be.device, what)
    arr, dtype = None, None
    if error is None:
        try:
            arr = be.local_array(x, what)
            dtype = be.dtype(arr)
        except SpmmgnnError as exc:  # a tensor numpy cannot hold, on the host backend
            error = str(exc)
        except TypeError:  # numpy has no name for its dtype (bfloat16)
            error = (f"{what}: a {x.dtype} tensor has no numpy equivalent; convert it "
                     "first, e.g. x.double()")
    agree(op.grid.comm, error)
    vector = arr.ndim == 1
    arr = arr.reshape(-1, 1) if vector else arr
    return be.astype(arr, np.float64), vector, dtype


def _back(op, values, template, dtype: np.dtype, vector: bool):
    """``values`` in the kind (numpy or torch), dtype and dimensions of ``template``."""
    be = op.backend
    out = be.contiguous(values[:, 0] if vector else values)
    if dtype.kind == "f":
        out = be.astype(out, dtype)
    return be.like(out, template)


def cg(op, b, x0=None, tol: float = 1e-10, maxiter: int | None = None):
    """Collective: conjugate gradients for ``A x = b`` with a symmetric positive definite A.

    ``b``: this rank's rows (numpy or torch, 1-D, or 2-D for several right-hand sides solved
    together); ``x0``: the start (zeros by default). Stops when every column's residual
    ||b - A x|| is at most ``tol`` ||b|| or after ``maxiter`` steps (default 10 n). Returns
    ``(x, SolveInfo)``, x this rank's rows in b's kind. One ``matmul`` and two reductions per
    step. A direction with p^T A p <= 0 (A not positive definite) is one error everywhere."""
    _square_symmetric(op, "cg")
    be, host = op.backend, _Host(op)
    rhs, vector, dtype = _as_float64(op, b, "cg")
    maxiter = 10 * op.n if maxiter is None else int(maxiter)
    if x0 is None:
        x = be.zeros(tuple(rhs.shape), np.float64)
        r = be.copy(rhs)
    else:
        x = be.copy(_as_float64(op, x0, "cg (x0)")[0])
        r = rhs - op.matmul(x)  # validates x0 against b's layout (collective)
    b_norm = host(op.norm(rhs))
    b_norm = np.where(b_norm > 0, b_norm, 1.0)
    p = be.copy(r)
    rr = host(op.dot(r, r))
    residual = np.sqrt(rr) / b_norm
    it = 0
    while residual.max() > tol and it < maxiter:
        it += 1
        ap = op.matmul(p)
        pap = host(op.dot(p, ap))
        active = rr > 0
        if np.any(active & (pap <= 0)):  # the same reduced numbers on every rank
            raise collective_error(f"cg: p^T A p = {pap[active].min():.3g} <= 0 at step {it}: "
                                   "A is not positive definite")
        alpha = host.back(np.divide(rr, pap, out=np.zeros_like(rr), where=active))
        x += p * alpha
        r -= ap * alpha
        rr_next = host(op.dot(r, r))
        beta = np.divide(rr_next, rr, out=np.zeros_like(rr), where=active)
        p = r + p * host.back(beta)
        rr = rr_next
        residual = np.sqrt(rr) / b_norm
    worst = float(residual.max(initial=0.0))
    return _back(op, x, b, dtype, vector), SolveInfo(it, worst, worst <= tol)


def _start_block(op, block: int, seed: int) -> np.ndarray:
    """Uniform values in [-0.5, 0.5) from (seed, global id, column): the same start block
    on any number of ranks and grid."""
    ids = op.row_ids("input").astype(np.int64)
    keys = ids[:, None] * block + np.arange(block, dtype=np.int64)[None, :]
    return uniform_by_id(keys.reshape(-1), seed).reshape(ids.size, block) - 0.5


def subspace_iteration(op, k: int, block: int | None = None, tol: float = 1e-8,
                       maxiter: int = 1000, x0=None, seed: int = 0):
    """Collective: the ``k`` eigenpairs of largest magnitude of a symmetric A by block
    subspace iteration (``Q R = A Q`` by ``op.qr``) with a Rayleigh–Ritz rotation every
    5 steps (the eigenvectors of ``Q^T A Q`` by ``op.gram``: the same matrix, so the same
    rotation, on every rank). ``block``: vectors iterated (default ``k + max(4, k // 2)``,
    at most n; more converge faster); ``x0``: this rank's rows of a start block (default:
    random by global id, alike on any grid). Stops when every wanted pair has
    ||A q - theta q|| <= tol max |theta|. Returns ``(theta, Q, SolveInfo)``: the k values
    by decreasing magnitude (the same on every rank) and this rank's rows of their
    orthonormal vectors, in x0's kind (without x0: the grid's, numpy arrays or tensors on its
    device)."""
    _square_symmetric(op, "subspace_iteration")
    b = min(op.n, k + max(4, k // 2)) if block is None else int(block)
    if not 1 <= k <= b <= op.n:
        raise collective_error(f"subspace_iteration: need 1 <= k <= block <= n, got k={k}, "
                               f"block={b}, n={op.n}")
    host = _Host(op)
    if x0 is None:
        start, template, dtype = host.back(_start_block(op, b, seed)), None, None
    else:
        start, _, dtype = _as_float64(op, x0, "subspace_iteration (x0)")
        template = x0
    q, _ = op.qr(start)
    theta = np.zeros(b)
    residual = np.inf
    it = 0
    while it < maxiter:
        it += 1
        aq = op.matmul(q)
        if it % RAYLEIGH_RITZ_EVERY == 0 or it == maxiter:
            theta, w = np.linalg.eigh(host(op.gram(q, aq)))
            order = np.argsort(-np.abs(theta), kind="stable")
            rotate = host.back(w[:, order])
            theta, q, aq = theta[order], q @ rotate, aq @ rotate
            scale = max(float(np.abs(theta).max()), 1e-300)
            moved = aq[:, :k] - q[:, :k] * host.back(theta[:k])
            residual = float(host(op.norm(moved)).max()) / scale
            if residual <= tol:
                break
        q, _ = op.qr(aq)
    vectors = q[:, :k] if template is None else _back(op, q[:, :k], template, dtype, False)
    return theta[:k].copy(), vectors, SolveInfo(it, residual, residual <= tol)


def as_linear_operator(op):
    """A ``scipy.sparse.linalg.LinearOperator`` of A in the caller's numbering, for scipy's
    solvers, at P = 1 only. At P > 1 it is one error on every rank: scipy's solvers reduce
    with plain numpy, which would sum this rank's rows only (each rank then iterates on
    different numbers); use ``spmmgnn.krylov.cg`` / ``subspace_iteration`` or the
    operator's ``dot`` / ``norm`` / ``qr`` instead."""
    from scipy.sparse.linalg import LinearOperator

    P = op.grid.comm.Get_size()
    if P > 1:
        raise collective_error(
            f"as_linear_operator: only at P = 1 (here P = {P}): a one-process scipy solver "
            "would reduce this rank's rows only; use spmmgnn.krylov.cg or "
            "subspace_iteration, or op.dot / op.norm / op.qr in your own loop")
    rows, cols = op.row_ids("output"), op.row_ids("input")
    be = op.backend  # scipy's vectors are numpy: to the grid's kind and back

    def apply(fn, ids_in, ids_out, n_out, v):
        v = np.asarray(v, dtype=np.float64)
        vector = v.ndim == 1
        local = (v.reshape(-1, 1) if vector else v)[ids_in]
        out = np.empty((n_out, local.shape[1]))
        out[ids_out] = be.to_host(fn(be.from_host(np.ascontiguousarray(local), op.stats)),
                                  op.stats)
        return out[:, 0] if vector else out

    return LinearOperator(
        (op.m, op.n), dtype=np.float64,
        matvec=lambda v: apply(op.matmul, cols, rows, op.m, v),
        matmat=lambda v: apply(op.matmul, cols, rows, op.m, v),
        rmatvec=lambda v: apply(op.matmul_t, rows, cols, op.n, v),
        rmatmat=lambda v: apply(op.matmul_t, rows, cols, op.n, v))
