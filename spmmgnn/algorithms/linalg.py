"""Linear algebra on an operator's rows: reductions that count every row once, a
tall-skinny QR, and rows by global id. ``DistSpMM`` inherits these methods.

Each method takes this rank's rows (``side="input"``: the rows of X, laid out like the
columns of A; ``"output"``: the rows of ``A @ X``), as numpy arrays or CPU torch tensors,
float32 or float64, 2-D or a 1-D vector, and returns the input's kind. All are collective
over the grid and follow the rule of ``spmmgnn.collectives``: sums run over
``grid.across_block_rows`` (each row once, also on a 1.5D grid whose replicas hold the same
rows), and every rank gets the same bits. Inputs are validated like ``matmul``'s
(``check_local``: one small all-reduce, skipped with ``validate=False``).

``qr`` is CholQR2 (Yamamoto et al., ETNA 2015: two Cholesky QR passes, each one Gram
all-reduce of f x f numbers; orthogonal to working precision for a condition number up to
about 10^8), falling back to TSQR (Demmel et al. 2012: local Householder QRs, their R
factors all-gathered and factored once more; stable for any X) when the first Cholesky
factor fails or has a condition number above ``CHOLQR_MAX_COND``. Both run in float64.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg
from mpi4py import MPI

from ..collectives import REDUCE_OPS, allgather_blocks, allreduce_rows, fetch_rows_by_id
from ..convert import is_torch, like_input, to_numpy
from ..errors import SpmmgnnError, agree, collective_error

CHOLQR_MAX_COND = 1e6  # above this the first Cholesky factor hands over to TSQR
ROWS_ERROR = "expected this rank's"  # in check_local's message for a wrong shape


def _columns(x):
    """(x as 2-D, whether it was a 1-D vector): a vector is one column."""
    if getattr(x, "ndim", None) == 1:
        return x.reshape(-1, 1), True
    return x, False


def _result(values: np.ndarray, template, vector: bool):
    """``values`` (one per column, or a matrix) as the template's kind; one value for a
    vector input (a numpy scalar or a 0-d tensor)."""
    if vector:
        values = np.asarray(values).reshape(())
        return like_input(values, template) if is_torch(template) else values[()]
    return like_input(np.ascontiguousarray(values), template)


def _vector_out(rows: np.ndarray, template, vector: bool):
    return like_input(rows[:, 0] if vector else rows, template)


class RowAlgebra:
    """Reductions, QR and rows by id on the operator's row layouts (a mixin of DistSpMM;
    it reads ``grid``, ``validate``, ``_side`` and ``check_local``)."""

    # ------------------------------------------------------------ sides
    def _side_hint(self, side: str) -> str:
        """'; ... pass side=<the other side>', for errors about the rows of ``side`` on an
        operator whose two sides have different row counts."""
        if side == "output":
            return (f"; A is {self.m} x {self.n}: the rows of X and of matmul_t's output "
                    "(A.T @ Y) are the input side, pass side='input'")
        return (f"; A is {self.m} x {self.n}: the rows of matmul's output (A @ X) and of the "
                "input of matmul_t are the output side, pass side='output'")

    def _check_side(self, x, what: str, side: str, root: int = 0) -> np.ndarray:
        """``check_local`` for the rows of ``side``; when the two sides have different row
        counts, a wrong row count names the other side as the likely fix (the message is
        the same on every rank: it depends only on the agreed error and the layouts)."""
        if side not in ("input", "output"):  # check_local says so on every rank
            return self.check_local(x, what, 0, side, root)
        part, n_local = self._side(side)
        try:
            return self.check_local(x, what, n_local, side, root)
        except SpmmgnnError as exc:
            other = self._side("output" if side == "input" else "input")[0]
            if not (exc.collective and ROWS_ERROR in str(exc) and other.n != part.n):
                raise
            raise collective_error(f"{exc}{self._side_hint(side)}") from None

    # ------------------------------------------------------------ reductions
    def allreduce(self, a, op: str = "sum"):
        """Collective: combine ``a`` (a number, numpy array or torch tensor this rank
        computed from its own rows) over the ranks holding distinct rows, each row once;
        ``op`` is ``"sum"``, ``"max"`` or ``"min"``. Every rank passes the same shape and
        dtype and gets the same result, of its input's kind."""
        error = None
        if op not in REDUCE_OPS:
            error = f"allreduce: op must be one of {sorted(REDUCE_OPS)}, got {op!r}"
        elif is_torch(a) and a.requires_grad:
            error = ("allreduce: the tensor requires grad, and allreduce is not "
                     "differentiable; pass a.detach() (or a.item())")
        arr = None
        if error is None:
            arr, error = _as_array(a)
        comm = self.grid.comm
        if self.validate and comm.Get_size() > 1:
            code = 0 if error else arr.size * 4096 + arr.dtype.num * 16 + arr.ndim
            probe = np.array([error is not None, code, -code], dtype=np.int64)
            comm.Allreduce(MPI.IN_PLACE, probe, op=MPI.MAX)
            if probe[0] or probe[1] != -probe[2]:
                agree(comm, error or "allreduce: ranks disagree on the shape or dtype")
        elif error:
            raise collective_error(error) if comm.Get_size() == 1 else SpmmgnnError(error)
        allreduce_rows(self.grid, arr, op)
        if is_torch(a):
            return like_input(arr, a)
        if isinstance(a, (np.ndarray, np.generic)):
            return arr if arr.ndim else arr[()]
        return arr.item()

    def _rows(self, x, what: str, side: str):
        """(this rank's rows as 2-D numpy, was it a vector), validated collectively."""
        a, vector = _columns(x)
        return self._check_side(a, what, side), vector

    def _pair(self, x, y, what: str, side: str):
        a, vector = self._rows(x, what, side)
        b, _ = (a, vector) if y is x else self._rows(y, what, side)
        return a, b, vector

    def dot(self, x, y, side: str = "input"):
        """Collective: ``sum_i x[i, k] * y[i, k]`` over all rows, one value per column k
        (a single value for vectors), the same on every rank."""
        a, b, vector = self._pair(x, y, "dot", side)
        if a.shape[1] != b.shape[1]:  # f agreed on every rank: the same verdict everywhere
            raise collective_error(f"dot: x has {a.shape[1]} columns and y {b.shape[1]}")
        local = np.einsum("ij,ij->j", a, b)
        return _result(allreduce_rows(self.grid, local), x, vector)

    def norm(self, x, side: str = "input"):
        """Collective: the 2-norm of every column over all rows (one value for a vector)."""
        a, vector = self._rows(x, "norm", side)
        squares = allreduce_rows(self.grid, np.einsum("ij,ij->j", a, a))
        return _result(np.sqrt(squares), x, vector)

    def gram(self, x, y=None, side: str = "input"):
        """Collective: ``x.T @ y`` (``x.T @ x`` without y) over all rows, f_x x f_y, the
        same on every rank."""
        y = x if y is None else y
        a, b, _ = self._pair(x, y, "gram", side)
        return like_input(allreduce_rows(self.grid, np.ascontiguousarray(a.T @ b)), x)

    # ------------------------------------------------------------ tall-skinny QR
    def qr(self, x, side: str = "input"):
        """Collective: ``Q, R`` with ``X = Q R``, Q this rank's rows of a matrix with
        orthonormal columns and R the whole f x f upper triangle (non-negative diagonal,
        the same on every rank). CholQR2, or TSQR when X is too ill-conditioned for it
        (module docstring); computed in float64, returned in X's dtype and kind."""
        part, _ = self._side(side)
        a, vector = self._rows(x, "qr", side)
        f = a.shape[1]
        if part.n < f:
            raise collective_error(f"qr: X has {part.n} rows and {f} columns; a QR with "
                                   "orthonormal columns needs at least as many rows")
        a64 = a.astype(np.float64, copy=False)
        q, r = self._cholqr2(a64)
        if q is None:
            q, r = self._tsqr(a64)
        q = q.astype(a.dtype, copy=False)
        return _vector_out(q, x, vector), like_input(r.astype(a.dtype, copy=False), x)

    def _cholqr2(self, a: np.ndarray):
        """Two Cholesky QR passes, or (None, None) when the first factor is unusable (every
        rank decides alike: the Gram matrix has the same bits everywhere)."""
        r1 = _cholesky_upper(allreduce_rows(self.grid, a.T @ a))
        if r1 is None or np.linalg.cond(r1) > CHOLQR_MAX_COND:
            return None, None
        q1 = _solve_right(a, r1)
        r2 = _cholesky_upper(allreduce_rows(self.grid, q1.T @ q1))
        if r2 is None:
            return None, None
        return _solve_right(q1, r2), r2 @ r1

    def _tsqr(self, a: np.ndarray):
        """TSQR: local QR, the R factors of every block row stacked and factored once more;
        each rank multiplies its local Q by its slice of the stacked Q."""
        q_local, r_local = np.linalg.qr(a, mode="reduced")
        comm = self.grid.across_block_rows
        k = np.array(comm.allgather(r_local.shape[0]), dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(k)])
        stacked = allgather_blocks(comm, offsets, np.ascontiguousarray(r_local))
        q_stack, r = np.linalg.qr(stacked, mode="reduced")
        signs = np.where(np.diag(r) < 0, -1.0, 1.0)
        me = comm.Get_rank()
        mine = q_stack[offsets[me]:offsets[me + 1]] * signs
        return np.ascontiguousarray(q_local @ mine), signs[:, None] * r

    # ------------------------------------------------------------ rows by id
    def _relabelled(self, side: str, ids: np.ndarray) -> np.ndarray:
        """Caller's ids -> the operator's numbering (``iperm``, built once per side)."""
        part, _ = self._side(side)
        cache = self.__dict__.setdefault("_iperm_cache", {})
        if side not in cache:
            cache[side] = None if part.is_identity else part.iperm
        iperm = cache[side]
        return ids if iperm is None else iperm[ids]

    def fetch_rows(self, x, ids, side: str = "input"):
        """Collective: the rows of the distributed X with global ids ``ids`` (the caller's
        numbering; any number, any order, repeats allowed, another list on every rank),
        in that order. Each rank exchanges only the rows asked of it and by it."""
        part, _ = self._side(side)
        a, vector = self._rows(x, "fetch_rows", side)
        wanted, error = _global_ids(ids, part.n)
        if self.validate:
            agree(self.grid.comm, error)
        elif error:
            raise SpmmgnnError(error)
        rows = fetch_rows_by_id(self.grid.across_block_rows, part.offsets, a,
                                self._relabelled(side, wanted))
        return _vector_out(rows, x, vector)

    def allgather_rows(self, x, side: str = "input"):
        """Collective: the whole X (in the caller's order) on every rank."""
        part, _ = self._side(side)
        a, vector = self._rows(x, "allgather_rows", side)
        full = allgather_blocks(self.grid.across_block_rows, part.offsets, a)
        if not part.is_identity:
            ordered = np.empty_like(full)
            ordered[part.perm] = full
            full = ordered
        return _vector_out(full, x, vector)


def _as_array(a) -> tuple[np.ndarray | None, str | None]:
    """A copy of ``a`` as a numpy array of numbers (bool counts as int64), or the error."""
    try:
        arr = np.array(a.detach().cpu().numpy() if is_torch(a) else a)
    except TypeError as exc:  # e.g. a bfloat16 tensor, which numpy cannot hold
        return None, f"allreduce: cannot read {type(a).__name__} ({exc}); pass .float()"
    if arr.dtype == np.bool_:
        arr = arr.astype(np.int64)
    if arr.dtype.kind not in "fiu":
        return None, f"allreduce: expected numbers, got dtype {arr.dtype}"
    return arr, None


def _global_ids(ids, n: int) -> tuple[np.ndarray, str | None]:
    """The requested ids as int64, and what is wrong with them (None: nothing)."""
    arr = to_numpy(ids) if is_torch(ids) else np.asarray(ids)
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64), None
    if arr.ndim != 1 or arr.dtype.kind not in "iu":
        return np.zeros(0, dtype=np.int64), (
            f"fetch_rows: ids must be a 1-D list of integers, got {arr.dtype} of shape "
            f"{tuple(arr.shape)}")
    arr = arr.astype(np.int64, copy=False)
    lo, hi = int(arr.min()), int(arr.max())
    if lo < 0 or hi >= n:
        return np.zeros(0, dtype=np.int64), (
            f"fetch_rows: ids must lie in [0, {n}), got range [{lo}, {hi}]")
    return arr, None


def _cholesky_upper(g: np.ndarray) -> np.ndarray | None:
    """Upper R with ``g = R^T R``, or None when g is not numerically positive definite."""
    try:
        return np.linalg.cholesky(g).T
    except np.linalg.LinAlgError:
        return None


def _solve_right(a: np.ndarray, r: np.ndarray) -> np.ndarray:
    """``a @ inv(r)`` for upper triangular r, by a triangular solve."""
    return np.ascontiguousarray(scipy.linalg.solve_triangular(r, a.T, trans="T").T)
