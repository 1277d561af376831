"""The torch backend's local blocks: a LocalCSR as torch CSR tensors per dtype (``TorchBlock``,
A and Aᵀ), a tile that arrived by broadcast (``TorchTile``), the named buffers of a call
(``TorchPool``), and the dtype names both sides share."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from .convert import csr_index_bytes

TORCH_DTYPES = ("float32", "float64", "float16", "bfloat16", "uint8", "int32", "int64")


def torch_dtype(dtype):
    """torch's dtype of a numpy dtype (or name)."""
    import torch

    name = dtype if isinstance(dtype, str) else np.dtype(dtype).name
    return getattr(torch, name)


def numpy_dtype(dtype) -> np.dtype:
    """numpy's dtype of a torch dtype (float32, float64, uint8, int32, int64)."""
    return np.dtype(str(dtype).removeprefix("torch."))


def csr_tensor(indptr, indices, data, shape, device, dtype):
    """A torch sparse CSR tensor on ``device`` (int32 indices when they fit)."""
    import torch

    itype = torch.int32 if csr_index_bytes(shape, len(indices)) == 4 else torch.int64

    def put(a, t):
        a = a if isinstance(a, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(a))
        return a.to(device=device, dtype=t)

    with warnings.catch_warnings():  # "sparse CSR support is in beta", once per process
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(put(indptr, itype), put(indices, itype),
                                       put(data, dtype), size=tuple(int(s) for s in shape),
                                       check_invariants=False)


def _empty(block, x, out, accumulate: bool) -> bool:
    """True, with zeros written (or nothing added), when ``block`` has no non-zeros or ``x``
    no columns: the product then makes no CSR."""
    if block.nnz and x.shape[1]:
        return False
    if not accumulate:
        out.zero_()
    return True


def _product(a, x, out, accumulate: bool) -> None:
    """``out (+)= a @ x`` for a sparse CSR (or CSC) ``a``, written in place."""
    if accumulate:
        out.addmm_(a, x)
    else:
        out.addmm_(a, x, beta=0)


class TorchBlock:
    """A ``LocalCSR`` as torch CSR on the device, one copy per dtype used, and its
    transpose, made on the first ``t_matmul`` (cuSPARSE multiplies an explicit CSR faster
    than a transposed view)."""

    def __init__(self, m, device):
        self.m, self.device = m, device
        self.shape, self.nnz = tuple(m.shape), int(m.nnz)
        self._csr: dict = {}

    def csr(self, dtype, transposed: bool = False):
        key = (dtype, transposed)
        found = self._csr.get(key)
        if found is None:
            s = self.m.to_scipy()
            s = s.T.tocsr() if transposed else s
            found = self._csr[key] = csr_tensor(s.indptr, s.indices, s.data, s.shape,
                                                self.device, dtype)
        return found

    def drop_transpose(self) -> None:
        self._csr = {k: v for k, v in self._csr.items() if not k[1]}

    def keep_values(self, dtype) -> None:
        """Free the CSR copies in dtypes other than numpy ``dtype`` (the symmetry probe's
        float64 ones once a float32 run starts: one CSR per block on the device)."""
        keep = torch_dtype(dtype)
        self._csr = {k: v for k, v in self._csr.items() if k[0] == keep}

    def matmul(self, x, out, accumulate: bool) -> None:
        if not _empty(self, x, out, accumulate):
            _product(self.csr(x.dtype), x, out, accumulate)

    def t_matmul(self, y, out, accumulate: bool) -> None:
        if not _empty(self, y, out, accumulate):
            _product(self.csr(y.dtype, transposed=True), y, out, accumulate)

    def nbytes(self) -> int:
        return sum(t.values().nbytes + t.crow_indices().nbytes + t.col_indices().nbytes
                   for t in self._csr.values())


class TorchTile:
    """A CSR tile given by its arrays (a tile that arrived by broadcast, or one held in
    float64 and multiplied in the call's dtype), as a torch CSR on the device per dtype
    used, made at its first product."""

    def __init__(self, indptr, indices, data, shape, device):
        self.shape, self.nnz = tuple(int(s) for s in shape), int(indices.shape[0])
        self.arrays, self.device = (indptr, indices, data), device
        self._csr: dict = {}

    def csr(self, dtype):
        found = self._csr.get(dtype)
        if found is None:
            found = self._csr[dtype] = csr_tensor(*self.arrays, self.shape, self.device,
                                                  dtype)
        return found

    def matmul(self, x, out, accumulate: bool) -> None:
        if not _empty(self, x, out, accumulate):
            _product(self.csr(x.dtype), x, out, accumulate)

    def t_matmul(self, y, out, accumulate: bool) -> None:
        if not _empty(self, y, out, accumulate):
            _product(self.csr(y.dtype).t(), y, out, accumulate)

    def drop_transpose(self) -> None:
        pass


class TorchPool:
    """Reusable work tensors on the device, keyed by (name, shape, dtype, slot)."""

    def __init__(self, device):
        self.device = device
        self._arrays: dict[tuple, Any] = {}
        self._ids: set[int] = set()

    def get(self, name: str, shape, dtype, slot=0):
        key = (name, tuple(int(s) for s in shape), np.dtype(dtype), slot)
        t = self._arrays.get(key)
        if t is None:
            import torch

            t = self._arrays[key] = torch.empty(key[1], dtype=torch_dtype(key[2]),
                                                device=self.device)
            self._ids.add(id(t))
        return t

    def owns(self, array) -> bool:
        return id(array) in self._ids

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self._arrays.values())
