"""Validation of every call's dense rows and the agreement of the ranks on the call: the
local checks (kind, device, grad, shape, dtype, NaN/Inf) and the operator's call probe
(``call_probe``: one small all-reduce, the same for every collective call) that finds a
problem on any rank, or ranks in different calls, and makes it one error on every rank
(``check_local``). A mixin of ``DistSpMM``; it reads ``grid``, ``backend``, ``validate``.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..backend.convert import FLOAT_DTYPES, is_torch, lazy_view_error
from ..backend.device import device_error
from ..backend.host import HOST
from ..runtime.errors import SpmmgnnError, agree
from .call_probe import CALLS as CALLS  # (base names the calls from here)
from .call_probe import SIDES, CallProbe


class Validation:
    """``check_local`` and ``local_rows`` (a mixin of ``DistSpMM``)."""

    def check_local(self, x, what: str, rows: int, side: str | None = None,
                    root: int = 0) -> np.ndarray:
        """Validate this rank's rows; collective (one small allreduce) unless validate=False,
        so a wrong shape on one rank, or ranks in different calls (``what``: matmul,
        matmul_t, gather_rows, scatter_rows) or with another ``side`` or ``root``, is an
        error everywhere instead of a hang or wrong rows. A tensor that requires grad is
        refused even then (detaching it would make its gradient wrong). With validate=False
        the caller guarantees that every rank makes the same call with the same width,
        dtype, side and root."""
        # (scatter_rows passes a placeholder here: root checks its X where it lives)
        be = HOST if what == "scatter_rows" else self.backend
        if not self.validate:
            if be.is_native(x) and be.is_contiguous(x):
                return x
            error = local_input_error(x, what, be.device)
            if error:
                raise SpmmgnnError(error)
            return be.local_array(x, what)
        comm = self.grid.comm
        if side is None and type(root) is int and root == 0 and be.is_native(x) \
                and be.well_formed(x, rows):
            # the common call, a C-contiguous float numpy block of the right rows without
            # NaN/Inf, passes every local check below: one process has nothing to agree on
            if comm.Get_size() == 1:
                return x
            arr, error = x, None
        else:
            arr, error = self.local_rows(x, what, None, backend=be)
            if side is not None and side not in SIDES:
                error = error or f"{what}: side must be 'input' or 'output', got {side!r}"
            if isinstance(root, bool) or not isinstance(root, (int, np.integer)) \
                    or not 0 <= root < comm.Get_size():
                error = error or (f"{what}: root must be a rank of the grid's "
                                  f"{comm.Get_size()}, got {root!r}")
                root = -1
            if what != "scatter_rows":  # (after side and root: a bad side explains rows)
                error = error or _rows_error(arr, what, rows, side, be)
            if comm.Get_size() == 1:
                agree(comm, error)
                return arr
        # the operator's one call agreement (call_probe): the same all-reduce for every call
        f = arr.shape[1] if arr.ndim == 2 else 0
        self.call_probe().agree((what, side, root, f, 0, be.dtype(arr).itemsize), error)
        return arr

    def call_probe(self) -> CallProbe:
        """The all-reduce every validated collective call of this operator starts with
        (``call_probe``), made on first use."""
        found = self.__dict__.get("_call_probe")
        if found is None:
            found = self._call_probe = CallProbe(self.grid.comm)
        return found

    @staticmethod
    def local_rows(x, what: str, rows: int | None, side: str | None = None,
                   backend=HOST) -> tuple:
        """This rank's rows as ``backend``'s array and what is wrong with them (None:
        nothing), without any communication: the local half of ``check_local``
        (``rows=None``: any shape), for callers that fold the agreement into their own
        reduction (``linalg``)."""
        error = local_input_error(x, what, backend.device)
        arr = _NOTHING
        if error is None:
            try:
                arr = backend.local_array(x, what)
            except SpmmgnnError as exc:  # a meta tensor: refused on every rank
                error = str(exc)
        if rows is not None and arr is not _NOTHING:
            error = error or _rows_error(arr, what, rows, side, backend)
        elif rows is not None:
            error = error or _rows_error(arr, what, rows, side, HOST)
        return arr, error


# the side whose rows each call takes when it has no side= (the others pass theirs)
CALL_SIDES = {"matmul": "input", "matmul_t": "output"}
ROWS_OF = {"input": "X, matmul's input: op.n_local_in",
           "output": "A @ X, matmul's output and matmul_t's input: op.n_local"}


def _rows_error(arr, what: str, rows: int, side: str | None = None, backend=HOST) -> str | None:
    """What is wrong with this rank's dense rows (``backend``'s array; None: nothing). A
    wrong row count names the side, how many rows it has on this rank, and how to get
    them."""
    if arr.ndim != 2 or arr.shape[0] != rows:
        side = side if side in ROWS_OF else CALL_SIDES.get(what)
        got = (f"shape {tuple(arr.shape)}" if arr.ndim != 2 else f"{arr.shape[0]} rows"
               + (f" (shape {tuple(arr.shape)})" if arr.shape[1] != 1 else ""))
        if side is None:
            return f"{what}: expected this rank's {rows} rows, got {got}"
        scatter = "op.scatter_rows(X)" if side == "input" else \
            "op.scatter_rows(Y, side='output')"
        return (f"{what}: expected this rank's {rows} rows of the {side} side "
                f"({ROWS_OF[side]}), as a 1-D vector or a 2-D array, got {got}; "
                f"{scatter} gives each rank its rows of a full matrix, "
                f"op.row_ids({side!r}) their global ids")
    if backend.dtype(arr) not in FLOAT_DTYPES:
        return (f"{what}: expected float32 or float64, got {arr.dtype}; convert with "
                "x.astype(np.float32) (numpy) or x.float() (torch)")
    if arr.shape[1] < 1:
        return f"{what}: the dense matrix needs at least one column"
    if backend.count_nonfinite(arr):
        return f"{what}: input has NaN or Inf values"
    return None


_NOTHING = np.zeros((0, 0))  # stands for an input that could not be read


def _kind_error(x, what: str) -> str | None:
    """The refusal of what is not a dense float array, naming the conversion: a scipy
    sparse matrix, a torch tensor numpy cannot hold (bfloat16) or of another float type."""
    if sp.issparse(x):
        return (f"{what}: got a scipy sparse {type(x).__name__}; the dense operand must be "
                "a numpy array or a torch tensor: pass X.toarray()")
    if is_torch(x) and str(x.dtype) not in ("torch.float32", "torch.float64"):
        return (f"{what}: expected float32 or float64, got {x.dtype}; convert with "
                "x.float() or x.double()")
    return lazy_view_error(x, what)


def local_input_error(x, what: str, device=None) -> str | None:
    """The refusals every call makes before reading ``x``: a tensor that requires grad, not
    a dense float array, or data on another device than the grid's (``device.device_error``:
    never a silent copy)."""
    return _grad_error(x, what) or _kind_error(x, what) or device_error(x, device, what)


def _grad_error(x, what: str) -> str | None:
    """The refusal of a torch tensor that requires grad: these methods move numbers, not
    autograd graphs, and silently detaching would leave its gradient wrong."""
    if not (is_torch(x) and x.requires_grad):
        return None
    hint = ("pass X.detach() if no gradient should flow" if what == "gather_rows" else
            "use spmmgnn.nn.spmm(op, X) for a differentiable A @ X, or pass X.detach() if no "
            "gradient should flow")
    return f"{what}: the tensor requires grad, and {what} is not differentiable; {hint}"

