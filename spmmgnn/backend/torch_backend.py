"""The torch backend: torch tensors on one device (``"cpu"``, ``"cuda"``, ``"cuda:k"``), the
local work by torch's own operations on that device (``torch.sparse.mm`` / ``addmm`` on CSR
tensors, ``index_select``, ``index_add_``), the integer codecs by ``torch_quantize`` (the host
codecs' bytes, bit for bit), the casts by torch's round-to-nearest-even.

MPI reads host memory: a CPU tensor's own memory, or on CUDA a pinned host copy made on a
copy stream (``staging.Staging``; none with a CUDA-aware MPI). Those copies are counted as the
``device_host`` tier of the caller's statistics, also on the CPU where nothing is copied (the
counters say what the same call moves across PCIe on a GPU). Over ``torch.distributed``
(``transport="torch"``) nothing is staged and nothing is counted there.

``device="cpu"`` runs the very functions CUDA runs, so CI tests the device path.
"""

from __future__ import annotations

import numpy as np

from ..local.codecs import CastCodec
from .convert import number_array, numbers_like
from .staging import Staging
from .torch_blocks import (  # noqa: F401 (the names callers import from here)
    TORCH_DTYPES,
    TorchBlock,
    TorchPool,
    TorchTile,
    csr_tensor,
    numpy_dtype,
    torch_dtype,
)


class TorchBackend:
    """torch tensors on ``device`` (``ProcessGrid(device=...)``). ``direct``: MPI takes
    device tensors itself (a CUDA-aware MPI, ``staging.cuda_aware``)."""

    name = "torch"
    mpi_native = False  # MPI reads host views or staged copies of its tensors

    def __init__(self, device, direct: bool = False):
        self.device = device
        self.host_memory = device.type == "cpu"
        self.dist_backend = "gloo" if self.host_memory else "nccl"  # torch.distributed's
        self.direct = direct
        self.staging = Staging(device, direct)
        self._index: dict[int, tuple] = {}

    def __repr__(self) -> str:
        return f"TorchBackend({self.device})"

    @property
    def dropout_impl(self) -> str:
        """How bias + ReLU + dropout runs here (``backend.fused``): "triton" kernels, or
        their "torch" twin."""
        from .fused import triton_runs_on

        return "triton" if triton_runs_on(self.device) else "torch"

    def default_transport(self, size: int) -> str:
        """``transport="auto"``'s choice: NCCL on CUDA with more than one rank (MPI from
        ``pip`` cannot read GPU memory: every exchange would be staged), else MPI."""
        return "torch" if self.dist_backend == "nccl" and size > 1 else "mpi"

    # ------------------------------------------------------------ arrays
    def pool(self) -> TorchPool:
        return TorchPool(self.device)

    def empty(self, shape, dtype):
        import torch

        return torch.empty(tuple(int(s) for s in shape), dtype=torch_dtype(dtype),
                           device=self.device)

    def zeros(self, shape, dtype):
        import torch

        return torch.zeros(tuple(int(s) for s in shape), dtype=torch_dtype(dtype),
                           device=self.device)

    out = empty

    @staticmethod
    def dtype(x) -> np.dtype:
        return numpy_dtype(x.dtype)

    @staticmethod
    def nbytes(x) -> int:
        return x.numel() * x.element_size()

    @staticmethod
    def contiguous(x):
        return x.contiguous()

    def from_host(self, a: np.ndarray, stats=None):
        """A tensor of ``a`` on the device (its memory on the CPU), counted as received on
        the ``device_host`` tier with ``stats``."""
        import torch

        a = np.asarray(a)  # (ascontiguousarray would make a 0-d array 1-d)
        t = torch.from_numpy(a if a.flags.c_contiguous else np.ascontiguousarray(a))
        if stats is not None:
            stats.bytes_host_to_device += int(a.nbytes)
        if self.device.type == "cpu":
            return t
        if t.numel() == 0:
            return torch.empty(t.shape, dtype=t.dtype, device=self.device)
        return t.to(self.device)

    def to_host(self, x, stats=None) -> np.ndarray:
        """A C-contiguous numpy copy (a view on the CPU) of ``x``, counted as sent on the
        ``device_host`` tier with ``stats``."""
        x = x.detach()
        if x.device.type != "cpu" and x.numel() == 0:
            return np.empty(tuple(x.shape), dtype=numpy_dtype(x.dtype))
        x = x.contiguous()
        if stats is not None:
            stats.bytes_device_to_host += x.numel() * x.element_size()
        return (x if x.device.type == "cpu" else x.cpu()).numpy()

    def index(self, idx: np.ndarray):
        """``idx`` as an int64 tensor on the device, made once per list (kept alive with
        its source so that its id is not reused)."""
        found = self._index.get(id(idx))
        if found is None or found[0] is not idx:
            import torch

            t = torch.from_numpy(np.ascontiguousarray(idx, dtype=np.int64)).to(self.device)
            found = self._index[id(idx)] = (idx, t)
        return found[1]

    def is_native(self, x) -> bool:
        import torch

        return isinstance(x, torch.Tensor) and x.device == self.device

    @staticmethod
    def is_contiguous(x) -> bool:
        return x.is_contiguous() and not x.requires_grad

    def well_formed(self, x, rows: int, finite: bool = True) -> bool:
        """Whether tensor ``x`` passes every local check of a call taking ``rows`` rows
        (2-D, contiguous, float32/float64, a column or more, no grad, no NaN/Inf unless
        ``finite`` is False) in one quick test."""
        import torch

        return (x.ndim == 2 and x.shape[0] == rows and x.shape[1] > 0
                and x.dtype in (torch.float32, torch.float64) and x.is_contiguous()
                and not x.requires_grad and not (finite and self.count_nonfinite(x)))

    @staticmethod
    def local_array(x, what: str):
        """A caller's rows (a tensor on the device: checked before) without its graph."""
        return x.detach().contiguous()

    @staticmethod
    def like(y, template):
        return y

    def returned(self, y: np.ndarray, as_torch: bool = True, stats=None):
        """Host rows handed to the caller: a tensor on the device (counted with ``stats``)."""
        return self.from_host(y, stats)

    # ------------------------------------------------------------ local work
    def block(self, m) -> TorchBlock:
        return TorchBlock(m, self.device)

    def tile(self, indptr, indices, data, shape) -> TorchTile:
        return TorchTile(indptr, indices, data, shape, self.device)

    def row_pointers(self, rows, n_rows: int):
        """CSR row pointers of sorted COO row ids (int64, on the device)."""
        import torch

        indptr = torch.zeros(n_rows + 1, dtype=torch.int64, device=self.device)
        if rows.numel():
            indptr[1:] = torch.cumsum(torch.bincount(rows.to(torch.int64),
                                                     minlength=n_rows), 0)
        return indptr

    def gather_rows(self, x, idx: np.ndarray, out) -> None:
        import torch

        torch.index_select(x, 0, self.index(idx), out=out)

    def scatter_add(self, rows, idx: np.ndarray, out) -> None:
        out.index_add_(0, self.index(idx), rows)

    def take_at(self, x, idx: np.ndarray):
        """``x[idx]``, a new tensor (``idx``: kept by the caller for the plan's life)."""
        return x[self.index(idx)]

    def put_at(self, out, idx: np.ndarray, values) -> None:
        """``out[idx] = values``."""
        out[self.index(idx)] = values

    def _spans(self, starts: np.ndarray, w: int):
        import torch

        return self.index(starts)[:, None] + torch.arange(w, device=self.device)

    def take_spans(self, x, starts: np.ndarray, w: int):
        """The (n x w) rows ``x[starts[i]:starts[i] + w]`` of a flat ``x`` (``starts``: kept
        by the caller for the plan's life)."""
        return x[self._spans(starts, w)]

    def put_spans(self, out, starts: np.ndarray, values) -> None:
        """``out[starts[i]:starts[i] + w] = values[i]`` in a flat ``out``."""
        out[self._spans(starts, values.shape[1])] = values

    @staticmethod
    def count_nonfinite(x) -> int:
        """Entries of ``x`` that are NaN or Inf (0 or more: only "any" matters to callers):
        the sum first (one reduction, no mask), the elementwise test only when it is not
        finite, which finite values can also cause by overflowing."""
        import torch

        if x.numel() == 0 or bool(torch.isfinite(x.sum())):
            return 0
        return int((~torch.isfinite(x)).sum())

    @staticmethod
    def view_bytes(buf, dtype):
        return buf.view(torch_dtype(dtype))

    # ------------------------------------------------------------ codecs
    def encode(self, codec, x, idx: np.ndarray, out, key: int) -> int:
        """``codec``'s bytes of ``x[idx]`` in ``out`` (for an empty ``idx`` the first rows of
        ``x``, one per row of ``out``, as the host codecs: none when ``out`` has none)."""
        import torch

        from . import torch_quantize

        rows = x.index_select(0, self.index(idx)) if idx.size else x[:out.shape[0]]
        if isinstance(codec, CastCodec):
            cast = rows.to(torch_dtype(codec.wire))
            bad = int((~torch.isfinite(cast).all(dim=1)).sum()) if cast.numel() else 0
            out.copy_(cast.reshape(-1).view(torch.uint8).reshape(out.shape))
            return bad
        packed, bad = torch_quantize.encode(codec.bits, rows, key)
        out.copy_(packed)
        return bad

    def decode(self, codec, buf, out, idx: np.ndarray, accumulate: bool) -> None:
        from . import torch_quantize

        f = out.shape[1]
        if isinstance(codec, CastCodec):
            rows = buf.reshape(-1).view(torch_dtype(codec.wire)).reshape(-1, f).to(out.dtype)
        else:
            rows = torch_quantize.decode(codec.bits, buf, f, out.dtype)
        if idx.size:
            if accumulate:
                out.index_add_(0, self.index(idx), rows)
            else:
                out.index_copy_(0, self.index(idx), rows)
        elif accumulate:  # (the first rows of out, as the host codecs: none for no rows)
            out[:rows.shape[0]] += rows
        else:
            out[:rows.shape[0]].copy_(rows)

    # ------------------------------------------------------------ MPI's view of the data
    def wire_out(self, x, stats=None, name: str = "", reduction: bool = False):
        return self.staging.out(x, stats, name, reduction)

    def wire_in(self, recv, stats=None, name: str = "", reduction: bool = False):
        return self.staging.recv(recv, name, reduction)

    def wire_landed(self, host, recv, stats=None, reduction: bool = False) -> None:
        self.staging.landed(host, recv, stats, reduction)

    def wire_ready(self, send) -> None:
        self.staging.ready(send)

    @staticmethod
    def as_torch(x):
        return x

    def synchronize(self) -> None:
        """Wait for the device's queued work (timings of device work stop once it ran)."""
        if self.device.type == "cuda":
            import torch

            torch.cuda.synchronize(self.device)

    # ------------------------------------------------------------ row algebra (linalg)
    @staticmethod
    def column_dots(a, b):
        """``sum_i a[i, k] b[i, k]`` per column k, computed in float64 on the device."""
        import torch

        a64 = a.to(torch.float64)
        b64 = a64 if b is a else b.to(torch.float64)
        return (a64 * b64).sum(dim=0)

    @staticmethod
    def nonzero_columns(a):
        return (a != 0).any(dim=0)

    @staticmethod
    def column_max_abs(a):
        """Per column: the largest magnitude (0 for no rows), float64."""
        import torch

        if a.shape[0] == 0:
            return torch.zeros(a.shape[1], dtype=torch.float64, device=a.device)
        return a.abs().amax(dim=0).to(torch.float64)

    @staticmethod
    def scaled_squares(a, scale):
        """Per column k: ``sum_i (a[i, k] / scale[k])^2`` in float64."""
        import torch

        s = a.to(torch.float64) / scale
        return (s * s).sum(dim=0)

    @staticmethod
    def gram64(a, b):
        """``a.T @ b`` in float64 on the device."""
        import torch

        a64 = a.to(torch.float64)
        b64 = a64 if b is a else b.to(torch.float64)
        return (a64.T @ b64).contiguous()

    @staticmethod
    def astype(x, dtype):
        return x.to(torch_dtype(dtype))

    @staticmethod
    def copy(x):
        return x.clone()

    @staticmethod
    def solve_right(a, r):
        """``a @ inv(r)`` for upper triangular r (on the device), by a triangular solve."""
        import torch

        return torch.linalg.solve_triangular(r, a, upper=True, left=False).contiguous()

    @staticmethod
    def local_qr(a):
        import torch

        return torch.linalg.qr(a, mode="reduced")

    def take_rows(self, x, idx: np.ndarray):
        """A new tensor of ``x[idx]`` (``idx``: a list made for this call, sent each time)."""
        import torch

        t = torch.from_numpy(np.ascontiguousarray(idx, dtype=np.int64))
        return x.index_select(0, t.to(self.device))

    def put_rows(self, rows, idx: np.ndarray, out) -> None:
        """``out[idx] = rows`` (``idx``: a list kept for the plan's life, as ``index``)."""
        out.index_copy_(0, self.index(idx), rows)

    def reduced(self, values: np.ndarray, like, template, vector: bool, stats=None):
        """A reduction's host ``values`` in the dtype of ``like``, on the device: a 0-d
        tensor for a vector input."""
        values = np.ascontiguousarray(values.astype(self.dtype(like), copy=False))
        return self.from_host(values.reshape(()) if vector else values, stats)

    def numbers(self, a, stats=None) -> tuple[np.ndarray | None, str | None]:
        """A host copy of ``allreduce``'s input as numbers (a tensor of the grid counted
        as ``device_host`` with ``stats``), or what is wrong with it."""
        arr, error = number_array(a)
        if error is None and stats is not None and self.is_native(a):
            stats.bytes_device_to_host += self.nbytes(a)
        return arr, error

    def numbers_like(self, arr: np.ndarray, a, stats=None):
        """``allreduce``'s result as its input's kind (a tensor of the grid: counted)."""
        return self.from_host(arr, stats) if self.is_native(a) else numbers_like(arr, a)


    # ------------------------------------------------------------ dense ops of a step
    def place(self, t):
        """``t`` (a tensor or a module) on this backend's device."""
        return t.to(self.device)

    @staticmethod
    def of_tensor(t):
        """The backend array sharing tensor ``t``'s memory (a link's buffer): ``t``."""
        return t.detach()

    def vertex_ids(self, ids):
        """Global vertex ids as an int64 tensor on the device (one there already: itself)."""
        import torch

        if isinstance(ids, torch.Tensor) and ids.device == self.device:
            return ids
        return torch.as_tensor(np.ascontiguousarray(ids, dtype=np.int64)).to(self.device)

    @staticmethod
    def linear(h, w, b=None, add=None):
        """``h @ w (+ b) (+ add)`` by torch's products (``dense_torch.linear``)."""
        from .dense_torch import linear

        return linear(h, w, b, add)

    def relu_dropout(self, z, ids, p: float, seed: int, step: int, layer: int, bias=None,
                     col0: int = 0):
        """``dropout(relu(z + bias))`` with the vertex-keyed mask (``dense_torch``): the one
        method a fused kernel of the three replaces."""
        from .dense_torch import relu_dropout

        return relu_dropout(z, self.vertex_ids(ids), p, seed, step, layer, bias, col0)

    def vertex_dropout(self, x, ids, p: float, seed: int, step: int, layer: int):
        """Dropout of rows ``x`` with the vertex-keyed mask (``dense_torch``)."""
        from .dense_torch import vertex_dropout

        return vertex_dropout(x, self.vertex_ids(ids), p, seed, step, layer)

    def dropout_mask(self, ids, f: int, p: float, seed: int, step: int, layer: int):
        """The float32 ``len(ids) x f`` mask tensor on the device: ``1/(1-p)`` kept, 0
        dropped."""
        from .dense_torch import dropout_mask

        return dropout_mask(self.vertex_ids(ids), f, p, seed, step, layer)

    @staticmethod
    def loss_sum(logits, labels, rows):
        """Sum of cross-entropy over the rows ``rows`` (indices), by torch's operations."""
        from .dense_torch import loss_sum

        return loss_sum(logits, labels, rows)

    def evaluation_sums(self, logits, labels, rows: list, stats=None) -> np.ndarray:
        """Per split the loss sum and the correct predictions, computed on the device and
        copied to the host in one piece (counted as ``device_host`` with ``stats``)."""
        from .dense_torch import evaluation_sums

        return np.array(self.to_host(evaluation_sums(logits, labels, rows), stats),
                        dtype=np.float64)

    @staticmethod
    def adam_step(p, grad, state: dict, lr: float, betas, eps: float, wd: float) -> None:
        """One Adam step of ``p`` by torch's tensor operations on its device."""
        from .dense_torch import adam_step

        adam_step(p, grad, state, lr, betas, eps, wd)

    def training_memory(self, comm) -> int | None:
        """Collective over ``comm``: the bytes of device memory this rank may train in
        (``device.free_memory``; None: unknown, no check)."""
        from .device import free_memory

        return free_memory(self.device, comm)
