"""Linear algebra on an operator's rows: reductions that count every row once, a
tall-skinny QR, and rows by global id. ``DistSpMM`` inherits these methods.

Each method takes this rank's rows (``side="input"``: the rows of X, laid out like the
columns of A; ``"output"``: the rows of ``A @ X``), as the grid takes them (numpy arrays or
CPU torch tensors without a device, tensors on the grid's device with one), float32 or
float64, 2-D or a 1-D vector, and returns the input's kind. All are collective
over the grid and follow the rule of ``spmmgnn.exchange.collectives``: sums run over
``grid.across_block_rows`` (each row once, also on a 1.5D grid whose replicas hold the same
rows), and every rank gets the same bits. Inputs are validated like ``matmul``'s; ``dot``,
``norm`` and ``gram`` fold the agreement (call, side, widths, dtype, errors) into the
all-reduce of their sum, and accumulate in float64; the others use ``check_local``. Either
way the first collective of every call is the operator's one call probe (``call_probe``:
one small all-reduce, the same for every call, so ranks in different calls get one error;
``validate=False`` skips it).

``qr`` is CholQR2 (Yamamoto et al., ETNA 2015: two Cholesky QR passes, each one Gram
all-reduce of f x f numbers; orthogonal to working precision for a condition number up to
about 10^8), falling back to TSQR (Demmel et al. 2012: local Householder QRs, their R
factors all-gathered and factored once more; stable for any X) when the first Cholesky
factor fails or has a condition number above ``CHOLQR_MAX_COND``. Both run in float64.

The local arithmetic runs on the grid's backend (``backend.protocol``, "row algebra"):
numpy on the host, torch on the device. Only the small results (f sums, f x f Gram and R
factors) cross to the host for the MPI reduction and agreement, and back; the rows of
``fetch_rows`` and ``allgather_rows`` travel by the grid's link. On a torch backend every
such copy counts as the ``device_host`` tier of the operator's statistics.
"""

from __future__ import annotations

import math

import numpy as np

from ..backend.convert import FLOAT_DTYPES, host_array
from ..backend.host import HOST, dot1
from ..exchange.collectives import REDUCE_OPS, allgather_blocks, allreduce_rows, fetch_rows_by_id
from ..local.hashing import mix64
from ..runtime.errors import SpmmgnnError, agree, collective_error
from ..runtime.threads import scope
from ..runtime.wire import allgather_json
from .call_probe import FOLD, MAX_WORD

CHOLQR_MAX_COND = 1e6  # above this the first Cholesky factor hands over to TSQR
ROWS_ERROR = "expected this rank's"  # in check_local's message for a wrong shape
SIDES = ("input", "output")
REDUCE_NAMES = sorted(REDUCE_OPS)
_EMPTY = np.zeros((0, 0))


def _columns(x):
    """(x as 2-D, whether it was a 1-D vector): a vector is one column."""
    if getattr(x, "ndim", None) == 1:
        return x.reshape(-1, 1), True
    return x, False


class RowAlgebra:
    """Reductions, QR and rows by id on the operator's row layouts (a mixin of DistSpMM;
    it reads ``grid``, ``backend``, ``stats``, ``validate``, ``_side``, ``check_local`` and
    ``call_probe``)."""

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
        be = self.backend
        if op not in REDUCE_OPS:
            error = f"allreduce: op must be one of {sorted(REDUCE_OPS)}, got {op!r}"
        elif getattr(a, "requires_grad", False):
            error = ("allreduce: the tensor requires grad, and allreduce is not "
                     "differentiable; pass a.detach() (or a.item())")
        arr = None
        if error is None:
            arr, error = be.numbers(a, self.stats)
        comm = self.grid.comm
        if self.validate and comm.Get_size() > 1:
            # the shape itself (not only its size), the dtype and the op: (2, 3) against
            # (3, 2), or "sum" against "max", would otherwise combine into a mix
            code = 0 if error else mix64(REDUCE_NAMES.index(op), arr.dtype.num, arr.ndim,
                                         *arr.shape) >> 2
            self.call_probe().agree(("allreduce", None, 0, code & MAX_WORD, code >> 32, 0),
                                    error)
        elif error:
            raise collective_error(error) if comm.Get_size() == 1 else SpmmgnnError(error)
        allreduce_rows(self.grid, arr, op)
        return be.numbers_like(arr, a, self.stats)

    def _rows(self, x, what: str, side: str):
        """(this rank's rows as a 2-D backend array, was it a vector), validated
        collectively."""
        a, vector = _columns(x)
        return self._check_side(a, what, side), vector

    def _local(self, x, what: str, side: str,
               finite_later: bool = False) -> tuple:
        """(this rank's rows as a 2-D backend array, was it a vector, what is wrong: None if
        nothing), without communication; the agreement comes with the reduction
        (``_checked_sum``). ``finite_later``: a well-formed block skips the NaN/Inf scan,
        because the caller's sums show them (``_finite_error``)."""
        if side not in SIDES:
            return _EMPTY, False, f"{what}: side must be 'input' or 'output', got {side!r}"
        part, n_local = self._side(side)
        a, vector = _columns(x)
        be = self.backend
        if be.is_native(a) and be.well_formed(a, n_local, finite=not finite_later):
            return a, vector, None  # (local_rows would find nothing else wrong)
        arr, error = self.local_rows(a, what, n_local, side, backend=be)
        if error and ROWS_ERROR in error:
            other = self._side("output" if side == "input" else "input")[0]
            if other.n != part.n:
                error += self._side_hint(side)
        return arr, vector, error

    def _checked_sum(self, what: str, side: str, widths: tuple[int, int], itemsize: int,
                     error: str | None, local: np.ndarray | None) -> np.ndarray:
        """Collective: ``local`` (float64, 1-D: this rank's share) summed over the distinct
        rows, the same bits on every rank, once every rank agreed on the call, ``side``,
        ``widths`` and ``itemsize`` and none had an ``error`` (else one SpmmgnnError on
        every rank). The agreement travels in the sum's own all-reduce (the operator's
        ``call_probe``, which every collective call starts with): one all-reduce a call when
        ``local`` has at most ``FOLD`` values and the grid has no replicas, else the probe's
        and then the sum's (``validate=False``: the sum's only)."""
        comm = self.grid.comm
        if not self.validate or comm.Get_size() == 1:
            if error:
                raise collective_error(error) if comm.Get_size() == 1 else SpmmgnnError(error)
            return local if comm.Get_size() == 1 else allreduce_rows(self.grid, local)
        fold = error is None and local.size <= FOLD and self._without_replicas()
        summed = self.call_probe().agree((what, side, 0, *widths, itemsize), error,
                                         local if fold else None)
        if summed is None:  # every rank agreed; the sum did not fit the probe
            return allreduce_rows(self.grid, local)
        return summed

    def _without_replicas(self) -> bool:
        """Whether every rank of the grid holds rows of its own (no 1.5D replicas)."""
        found = self.__dict__.get("_no_replicas")
        if found is None:
            grid = self.grid
            found = self._no_replicas = (grid.across_block_rows.Get_size()
                                         == grid.comm.Get_size())
        return found

    def _plain_vector(self, x, side: str) -> bool:
        """Whether ``x`` is a C-contiguous float32/float64 numpy vector of this rank's rows
        of ``side`` on a numpy grid: the one case ``dot`` and ``norm`` take without
        ``_local``'s checks (the Krylov methods' calls: each check costs a fraction of a
        microsecond, and the call is a few)."""
        if type(x) is not np.ndarray or x.ndim != 1 or x.dtype not in FLOAT_DTYPES \
                or self.backend is not HOST or not x.flags.c_contiguous:
            return False
        if side == "input":
            return x.shape[0] == self.n_local_in
        return side == "output" and x.shape[0] == self.n_local

    def _vector_sum(self, what: str, side: str, x: np.ndarray,
                    local: np.ndarray) -> np.ndarray:
        """``_checked_sum`` of a vector call's share: the same words and collectives as the
        general path's for a one-column x (a rank taking either path agrees with the
        others)."""
        return self._checked_sum(what, side, (1, 1 if what == "dot" else 0), x.itemsize,
                                 None, local)

    def dot(self, x, y, side: str = "input"):
        """Collective: ``sum_i x[i, k] * y[i, k]`` over all rows, one value per column k
        (a single value for vectors), the same on every rank; float32 accumulates in
        float64 and is rounded once at the end."""
        if self._plain_vector(x, side) and (y is x or (
                type(y) is np.ndarray and y.dtype == x.dtype and self._plain_vector(y, side))):
            s = dot1(x, y)
            if math.isfinite(s):  # (else the general path names the NaN/Inf)
                return x.dtype.type(self._vector_sum("dot", side, x, np.array([s]))[0])
        a, vector, error = self._local(x, "dot", side, finite_later=True)
        # (y is x: the same check; the collectives do not depend on it, see _checked_sum)
        b, _, error_y = (a, vector, None) if y is x else self._local(y, "dot", side, True)
        error = error or error_y
        if error is None and a.shape[1] != b.shape[1]:
            error = f"dot: x has {a.shape[1]} columns and y {b.shape[1]}"
        be, stats = self.backend, self.stats
        local = None if error else be.to_host(be.column_dots(a, b), stats)
        if local is not None and not _all_finite(local):
            error = self._finite_error("dot", side, a, b)
        total = self._checked_sum("dot", side, (a.shape[1], b.shape[1]),
                                  max(a.itemsize, b.itemsize), error, local)
        return be.reduced(total, a, x, vector, stats)

    def _finite_error(self, what: str, side: str, *arrays) -> str | None:
        """The NaN/Inf error of the first array holding one (None: every entry is finite and
        a sum overflowed). A sum of products is finite only when every factor is (Inf times
        0 is NaN), so a finite sum needs no scan of its inputs."""
        n_local = self._side(side)[1]
        for arr in arrays:
            error = self.local_rows(arr, what, n_local, side, backend=self.backend)[1]
            if error:
                return error
        return None

    def norm(self, x, side: str = "input"):
        """Collective: the 2-norm of every column over all rows (one value for a vector);
        accumulated in float64, and scaled when the squares would overflow or underflow
        (then one more all-reduce of the columns' largest magnitudes)."""
        if self._plain_vector(x, side):
            s = dot1(x, x)
            if 1e-290 < s < 1e300:  # (else the general path: NaN/Inf, zero, or scaling)
                total = self._vector_sum("norm", side, x, np.array([s, 0.0]))
                if total[1] > 0:  # another rank's squares need scaling: all scale
                    return x.dtype.type(self._scaled_norm(x.reshape(-1, 1))[0])
                return x.dtype.type(math.sqrt(total[0]))
        a, vector, error = self._local(x, "norm", side, finite_later=True)
        be, stats = self.backend, self.stats
        local = None
        if error is None:
            f = a.shape[1]
            local = np.empty(f + 1)
            local[:f] = be.to_host(be.column_dots(a, a), stats)
            if not _all_finite(local[:f]):  # NaN/Inf in x, or squares that overflowed
                error = self._finite_error("norm", side, a)
        if error is None:  # counted over the ranks with the sums
            local[f] = self._needs_scaling(a, local[:f])
        else:
            local = None
        total = self._checked_sum("norm", side, (a.shape[1], 0), a.itemsize, error, local)
        f = a.shape[1]
        if total[f] > 0:  # every rank sees the same count: all take this path together
            return be.reduced(self._scaled_norm(a), a, x, vector, stats)
        return be.reduced(np.sqrt(total[:f]), a, x, vector, stats)

    def _needs_scaling(self, a, squares: np.ndarray) -> bool:
        """Would a column's sum of squares overflow or lose digits to underflow?"""
        if squares.size == 1 and 1e-290 < squares[0] < 1e300:  # one column: no temporaries
            return False
        ok = (squares < 1e300) & (squares > 1e-290)
        if ok.all():
            return False
        be = self.backend  # (a zero column's 0 is exact)
        return bool(np.any(~ok & be.to_host(be.nonzero_columns(a), self.stats)))

    def _scaled_norm(self, a) -> np.ndarray:
        """Column 2-norms as ``s * sqrt(sum((x / s)^2))``, s the largest magnitude of the
        column over all rows (LAPACK's dnrm2 scaling): finite for any finite X."""
        be, stats = self.backend, self.stats
        top = allreduce_rows(self.grid, be.to_host(be.column_max_abs(a), stats), "max")
        scale = np.where(top > 0, top, 1.0)
        squares = be.scaled_squares(a, be.from_host(scale, stats))
        return scale * np.sqrt(allreduce_rows(self.grid, be.to_host(squares, stats)))

    def gram(self, x, y=None, side: str = "input"):
        """Collective: ``x.T @ y`` (``x.T @ x`` without y) over all rows, f_x x f_y, the
        same on every rank; float32 accumulates in float64 and is rounded once."""
        a, _, error = self._local(x, "gram", side)
        b, error_y = a, None
        if y is not None and y is not x:  # (the collectives are the same either way)
            b, _, error_y = self._local(y, "gram", side)
        error = error or error_y
        be, stats = self.backend, self.stats
        local = None
        if error is None:
            with scope(blas=True):
                local = be.to_host(be.gram64(a, b), stats).reshape(-1)
        dtype_a, dtype_b = be.dtype(a), be.dtype(b)
        total = self._checked_sum("gram", side, (a.shape[1], b.shape[1]),
                                  max(dtype_a.itemsize, dtype_b.itemsize), error, local)
        g = total.reshape(a.shape[1], b.shape[1]).astype(np.result_type(dtype_a, dtype_b))
        return be.like(be.from_host(np.ascontiguousarray(g), stats), x)

    # ------------------------------------------------------------ tall-skinny QR
    def qr(self, x, side: str = "input"):
        """Collective: ``Q, R`` with ``X = Q R``, Q this rank's rows of a matrix with
        orthonormal columns and R the whole f x f upper triangle (non-negative diagonal,
        the same on every rank). CholQR2, or TSQR when X is too ill-conditioned for it
        (module docstring); computed in float64, returned in X's dtype and kind."""
        a, vector = self._rows(x, "qr", side)
        part, _ = self._side(side)
        f = a.shape[1]
        if part.n < f:
            raise collective_error(f"qr: X has {part.n} rows and {f} columns; a QR with "
                                   "orthonormal columns needs at least as many rows")
        be = self.backend
        dtype = be.dtype(a)
        a64 = be.astype(a, np.float64)
        with scope(blas=True):  # the library's BLAS threads, the caller's back after
            q, r = self._cholqr2(a64)
            if q is None:
                q, r = self._tsqr(a64)
        q = be.astype(q, dtype)
        r = be.from_host(r.astype(dtype, copy=False), self.stats)
        return be.like(q[:, 0] if vector else q, x), be.like(r, x)

    def _gram_sum(self, a) -> np.ndarray:
        """``a.T @ a`` over all rows (float64 a), on the host, the same bits everywhere."""
        be = self.backend
        return allreduce_rows(self.grid, be.to_host(be.gram64(a, a), self.stats))

    def _cholqr2(self, a):
        """Two Cholesky QR passes, or (None, None) when the first factor is unusable (every
        rank decides alike: the Gram matrix has the same bits everywhere)."""
        be, stats = self.backend, self.stats
        r1 = _cholesky_upper(self._gram_sum(a))
        if r1 is None or np.linalg.cond(r1) > CHOLQR_MAX_COND:
            return None, None
        q1 = be.solve_right(a, be.from_host(r1, stats))
        r2 = _cholesky_upper(self._gram_sum(q1))
        if r2 is None:
            return None, None
        return be.solve_right(q1, be.from_host(r2, stats)), r2 @ r1

    def _tsqr(self, a):
        """TSQR: local QR, the R factors of every block row stacked and factored once more
        (on the host); each rank multiplies its local Q by its slice of the stacked Q."""
        be, stats = self.backend, self.stats
        q_local, r_local = be.local_qr(a)
        r_local = be.to_host(r_local, stats)
        comm = self.grid.across_block_rows
        k = np.array(allgather_json(comm, r_local.shape[0]), dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(k)])
        stacked = allgather_blocks(comm, offsets, np.ascontiguousarray(r_local))
        q_stack, r = np.linalg.qr(stacked, mode="reduced")
        signs = np.where(np.diag(r) < 0, -1.0, 1.0)
        me = comm.Get_rank()
        mine = be.from_host(q_stack[offsets[me]:offsets[me + 1]] * signs, stats)
        return be.contiguous(q_local @ mine), signs[:, None] * r

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
        a, vector = self._rows(x, "fetch_rows", side)
        part, _ = self._side(side)
        wanted, error = _global_ids(ids, part.n)
        if self.validate:
            agree(self.grid.comm, error)
        elif error:
            raise SpmmgnnError(error)
        comm = self.grid.across_block_rows
        rows = fetch_rows_by_id(comm, part.offsets, a, self._relabelled(side, wanted),
                                self.grid.link(comm), self.stats)
        return self.backend.like(rows[:, 0] if vector else rows, x)

    def allgather_rows(self, x, side: str = "input"):
        """Collective: the whole X (in the caller's order) on every rank."""
        a, vector = self._rows(x, "allgather_rows", side)
        part, _ = self._side(side)
        be, comm = self.backend, self.grid.across_block_rows
        full = allgather_blocks(comm, part.offsets, a, self.grid.link(comm), self.stats)
        if not part.is_identity:
            ordered = be.empty(tuple(full.shape), be.dtype(full))
            be.put_rows(full, part.perm, ordered)
            full = ordered
        return be.like(full[:, 0] if vector else full, x)


def _global_ids(ids, n: int) -> tuple[np.ndarray, str | None]:
    """The requested ids as int64, and what is wrong with them (None: nothing)."""
    arr = host_array(ids)
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


def _all_finite(values: np.ndarray) -> bool:
    """No NaN/Inf among a few sums (one value: a float compare, no array temporaries)."""
    if values.size == 1:
        return math.isfinite(values[0])
    return bool(np.isfinite(values).all())
