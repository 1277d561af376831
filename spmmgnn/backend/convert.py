"""numpy <-> torch at the API boundary, without copies where the memory allows it."""

from __future__ import annotations

import sys

import numpy as np

from ..runtime.errors import SpmmgnnError

FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def is_torch(x) -> bool:
    """Whether x is a torch tensor, without importing torch: a tensor exists only once its
    caller imported torch, so ``sys.modules`` has it whenever the answer is yes."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def lazy_view_error(x, what: str) -> str | None:
    """The refusal of a torch tensor with its negative or conjugate bit set (``z.conj().imag``
    is a lazily negated view: neither numpy nor MPI see the negation), naming the fix."""
    if not is_torch(x) or not (x.is_neg() or x.is_conj()):
        return None
    fix, bit = ("x.resolve_neg()", "negative") if x.is_neg() else ("x.resolve_conj()",
                                                                   "conjugate")
    return (f"{what}: the tensor is a lazy view with its {bit} bit set (e.g. z.conj().imag), "
            f"which neither numpy nor MPI can read as it is; pass {fix} (a copy that holds "
            "the values)")


def to_numpy(x, what: str = "input") -> np.ndarray:
    """A C-contiguous numpy view (or copy) of an array or tensor (copied to the CPU).
    SpmmgnnError naming ``what`` and the fix for a tensor numpy cannot hold: a meta tensor
    (no values), a lazily negated view, or a dtype without a numpy equivalent (bfloat16)."""
    if is_torch(x):
        if x.device.type == "meta":
            raise SpmmgnnError(f"{what}: a meta tensor has a shape but no values; pass a "
                               "tensor that holds data (e.g. created with device='cpu')")
        if (lazy := lazy_view_error(x, what)) is not None:
            raise SpmmgnnError(lazy)
        x = x.detach()
        if x.device.type != "cpu":
            x = x.cpu()
        try:
            x = x.numpy()
        except (TypeError, RuntimeError) as exc:
            kind = str(x.dtype).removeprefix("torch.")
            raise SpmmgnnError(f"{what}: a torch {kind} tensor has no numpy equivalent "
                               f"({str(exc).splitlines()[0]}); convert it first, e.g. "
                               "x.double() or x.float()") from None
    return np.ascontiguousarray(x)


def host_array(x) -> np.ndarray:
    """A caller's list, array or tensor (on any device: an index list, not the grid's rows)
    as a numpy array, its dimensions as given."""
    return to_numpy(x) if is_torch(x) else np.asarray(x)


def like_input(y: np.ndarray, template):
    """Return ``y`` as the same kind (numpy or torch) as ``template``, on its device (a
    grid with a device computed ``y`` on a host copy: the result goes back there)."""
    if is_torch(template):
        t = sys.modules["torch"].from_numpy(y)
        return t if template.device.type == "cpu" else t.to(template.device)
    return y


def number_array(a) -> tuple[np.ndarray | None, str | None]:
    """A copy of ``a`` (a number, a numpy array or a torch tensor on any device) as a numpy
    array of numbers (bool counts as int64), or what is wrong with it (``allreduce``'s
    input)."""
    try:
        arr = np.array(a.detach().cpu().numpy() if is_torch(a) else a)
    except TypeError as exc:  # e.g. a bfloat16 tensor, which numpy cannot hold
        return None, f"allreduce: cannot read {type(a).__name__} ({exc}); pass .float()"
    if arr.dtype == np.bool_:
        arr = arr.astype(np.int64)
    if arr.dtype.kind not in "fiu":
        return None, f"allreduce: expected numbers, got dtype {arr.dtype}"
    return arr, None


def numbers_like(arr: np.ndarray, a):
    """``arr`` (made by ``number_array(a)``) as ``a``'s kind: a tensor on ``a``'s device, a
    numpy array (a numpy scalar for a 0-d one), or a Python number."""
    if is_torch(a):
        return like_input(arr, a)
    if isinstance(a, (np.ndarray, np.generic)):
        return arr if arr.ndim else arr[()]
    return arr.item()


def mpi_float_type(dtype):
    """The MPI datatype of a float32/float64 numpy dtype."""
    from mpi4py import MPI

    return MPI.FLOAT if np.dtype(dtype) == np.float32 else MPI.DOUBLE


def csr_index_bytes(shape: tuple[int, int], nnz: int) -> int:
    """Bytes of one index of the torch backend's CSR: 4 (int32) when they fit, else 8."""
    return 4 if nnz < 2**31 - 1 and max(shape) < 2**31 - 1 else 8


def csr_bytes(shape: tuple[int, int], nnz: int, itemsize: int) -> int:
    """Bytes of the torch backend's CSR of a ``shape`` matrix with ``nnz`` non-zeros and
    values of ``itemsize`` bytes: row pointers, column indices and values."""
    index = csr_index_bytes(shape, nnz)
    return (int(shape[0]) + 1) * index + int(nnz) * (index + itemsize)
