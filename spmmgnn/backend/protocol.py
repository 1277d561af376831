"""The interfaces every algorithm is written against: a ``Backend`` (where a grid's numbers
live and the local operations on them) and a ``Link`` (the data-plane collectives of one of
the grid's communicators, from the grid's transport).

A grid chooses both once (``ProcessGrid(device=..., transport=...)``), like PETSc's star
forest asking for the memory type once and DTensor's ``DeviceMesh`` holding one device: the
``host`` backend keeps numpy arrays and runs the numba kernels, the ``torch`` backend keeps
torch tensors on one device (``"cpu"``, ``"cuda"``, ``"cuda:k"``) and runs torch's own
operations there. Code above this package never asks which one it holds: it calls these
methods on whatever arrays the backend hands out. The operations shared by numpy arrays and
torch tensors (``.shape``, basic slicing, ``a[...] = b``, ``a += b``, ``reshape``) are used
directly.

Small agreement collectives (errors, probes, plan construction) always run on MPI; only the
per-call movement of rows goes through a ``Link``.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np

Array = Any  # a numpy array (host backend) or a torch tensor (torch backend)


@runtime_checkable
class Block(Protocol):
    """One local sparse block, ready to multiply on its backend."""

    shape: tuple[int, int]
    nnz: int

    def matmul(self, x: Array, out: Array, accumulate: bool) -> None:
        """``out = self @ x`` (``accumulate``: ``out += self @ x``)."""

    def t_matmul(self, y: Array, out: Array, accumulate: bool) -> None:
        """``out = self.T @ y`` (``accumulate``: ``out += self.T @ y``)."""

    def drop_transpose(self) -> None:
        """Free a transposed copy made for ``t_matmul`` (a symmetric A needs none)."""


class Pool(Protocol):
    """Reusable work arrays keyed by (name, shape, dtype, slot)."""

    def get(self, name: str, shape: tuple[int, ...], dtype, slot: int = 0) -> Array: ...

    def owns(self, array: Array) -> bool: ...

    def nbytes(self) -> int: ...


@runtime_checkable
class Backend(Protocol):
    """Where a grid's numbers live, and the operations the algorithms need on them."""

    name: str            # "host" or "torch"
    device: Any          # None (host) or the torch.device
    host_memory: bool    # arrays are host memory (numpy, CPU tensors)
    mpi_native: bool     # arrays are MPI buffers as they are (numpy)
    dist_backend: str    # torch.distributed's backend for these arrays: gloo or nccl

    @property
    def dropout_impl(self) -> str:
        """How bias + ReLU + dropout runs: ``numba``, ``triton`` or ``torch``."""

    def default_transport(self, size: int) -> str:
        """``"mpi"`` or ``"torch"``: what ``transport="auto"`` picks for ``size`` ranks."""

    # ------------------------------------------------------------ arrays
    def pool(self) -> Pool: ...

    def empty(self, shape: tuple[int, ...], dtype) -> Array: ...

    def zeros(self, shape: tuple[int, ...], dtype) -> Array: ...

    def dtype(self, x: Array) -> np.dtype:
        """numpy's dtype of ``x`` (the wire and the counters speak numpy)."""

    def nbytes(self, x: Array) -> int: ...

    def contiguous(self, x: Array) -> Array: ...

    def from_host(self, a: np.ndarray, stats=None) -> Array:
        """A backend array of host array ``a`` (counted as ``device_host`` with ``stats``
        off the host backend)."""

    def to_host(self, x: Array, stats=None) -> np.ndarray:
        """A host copy of ``x`` (a view where the memory allows; counted as above)."""

    def index(self, idx: np.ndarray) -> Array:
        """``idx`` (a plan's int64 index list, kept for the plan's life) where the backend
        reads it (made once per list)."""

    def out(self, shape: tuple[int, ...], dtype) -> Array:
        """A call's result array (the host reuses one once nothing references it)."""

    # ------------------------------------------------------------ the caller's arrays
    def is_native(self, x: Any) -> bool:
        """Whether ``x`` is this backend's kind of array (numpy; a tensor on the device)."""

    def is_contiguous(self, x: Array) -> bool: ...

    def well_formed(self, x: Array, rows: int, finite: bool = True) -> bool:
        """Every local check of a call taking ``rows`` rows, in one quick test."""

    def local_array(self, x: Any, what: str) -> Array:
        """A caller's (checked) rows as this backend's contiguous array."""

    def like(self, y: Array, template: Any) -> Any:
        """A result as the kind of the caller's input."""

    def returned(self, y: np.ndarray, as_torch: bool, stats=None) -> Any:
        """Host rows handed to the caller in this backend's kind."""

    def as_torch(self, x: Array) -> Any:
        """``x`` as a torch tensor sharing its memory (for ``torch.distributed``)."""

    def synchronize(self) -> None:
        """Wait for queued device work (timings)."""

    # ------------------------------------------------------------ local work
    def block(self, m) -> Block:
        """A ``local.local_matrix.LocalCSR`` ready to multiply here."""

    def tile(self, indptr: Array, indices: Array, data: Array,
             shape: tuple[int, int]) -> Block:
        """A CSR given by its arrays, multiplied in the dtype of the rows it meets (a tile
        that arrived by broadcast; its arrays are read, not copied, where they can be)."""

    def row_pointers(self, rows: Array, n_rows: int) -> Array:
        """CSR row pointers (int64) of sorted COO row ids (a broadcast tile's rows)."""

    def view_bytes(self, buf: Array, dtype) -> Array:
        """A flat byte buffer read as ``dtype`` (numpy's), no copy."""

    def gather_rows(self, x: Array, idx: np.ndarray, out: Array) -> None: ...

    def scatter_add(self, rows: Array, idx: np.ndarray, out: Array) -> None:
        """``out[idx[i]] += rows[i]``."""

    def take_at(self, x: Array, idx: np.ndarray) -> Array:
        """``x[idx]``, a new array (``idx``: an int64 index array of any shape, kept by the
        caller for the plan's life: the torch backend keeps its device copy)."""

    def put_at(self, out: Array, idx: np.ndarray, values: Array) -> None:
        """``out[idx] = values`` (``idx`` as ``take_at``'s)."""

    def take_spans(self, x: Array, starts: np.ndarray, w: int) -> Array:
        """The (n x w) rows ``x[starts[i]:starts[i] + w]`` of a flat ``x`` (``starts``:
        kept by the caller for the plan's life)."""

    def put_spans(self, out: Array, starts: np.ndarray, values: Array) -> None:
        """``out[starts[i]:starts[i] + w] = values[i]`` in a flat ``out`` (``values``:
        n x w)."""

    def count_nonfinite(self, x: Array) -> int: ...

    # ------------------------------------------------------------ codecs
    def encode(self, codec, x: Array, idx: np.ndarray, out: Array, key: int) -> int:
        """Encode ``x[idx]`` (for an empty ``idx`` the first rows of ``x``, one per row of
        ``out``) into the byte rows ``out``;
        returns the number of rows with NaN or Inf."""

    def decode(self, codec, buf: Array, out: Array, idx: np.ndarray,
               accumulate: bool) -> None:
        """Decode the byte rows ``buf`` into ``out`` (``idx`` non-empty: into ``out[idx]``,
        else into the first rows of ``out``, one per row of ``buf``; added when
        ``accumulate``)."""

    # ------------------------------------------------------------ MPI's view of the data
    def wire_out(self, x: Array, stats=None, name: str = "", reduction: bool = False) -> Any:
        """What MPI sends for ``x``: host memory holding its values (a view on the host).
        ``reduction``: MPI reduces it (staged even where MPI reads the arrays themselves:
        not every CUDA-aware MPI reduces device buffers)."""

    def wire_in(self, recv: Array, stats=None, name: str = "", reduction: bool = False) -> Any:
        """Where MPI receives what lands in ``recv`` (its own memory where MPI may write
        it in place)."""

    def wire_landed(self, host: Any, recv: Array, stats=None, reduction: bool = False) -> None:
        """Bring what MPI wrote into ``host`` (from ``wire_in``) into ``recv``."""

    def wire_ready(self, send: Any) -> None:
        """Before MPI reads ``send``: the copies or the work writing it have finished."""

    # ------------------------------------------------------------ row algebra (linalg)
    # The local halves of the operator's reductions and QR; only their small f or f x f
    # results cross to the host (``to_host``) for the MPI reduction and agreement.
    def column_dots(self, a: Array, b: Array) -> Array:
        """``sum_i a[i, k] b[i, k]`` per column k, accumulated in float64."""

    def nonzero_columns(self, a: Array) -> Array:
        """Per column: does it hold a non-zero (bool)?"""

    def column_max_abs(self, a: Array) -> Array:
        """Per column: the largest magnitude, float64 (0 for no rows)."""

    def scaled_squares(self, a: Array, scale: Array) -> Array:
        """Per column k: ``sum_i (a[i, k] / scale[k])^2`` in float64."""

    def gram64(self, a: Array, b: Array) -> Array:
        """``a.T @ b`` accumulated in float64."""

    def astype(self, x: Array, dtype) -> Array:
        """``x`` in numpy's ``dtype`` (``x`` itself when it has it)."""

    def copy(self, x: Array) -> Array: ...

    def solve_right(self, a: Array, r: Array) -> Array:
        """``a @ inv(r)`` for an upper triangular ``r``, by a triangular solve."""

    def local_qr(self, a: Array) -> tuple[Array, Array]:
        """The reduced QR of this rank's rows."""

    def take_rows(self, x: Array, idx: np.ndarray) -> Array:
        """A new array of ``x[idx]`` (``idx`` made for this call)."""

    def put_rows(self, rows: Array, idx: np.ndarray, out: Array) -> None:
        """``out[idx] = rows`` (``idx`` kept for the plan's life, as ``index``)."""

    def reduced(self, values: np.ndarray, like: Array, template: Any, vector: bool,
                stats=None) -> Any:
        """A reduction's host ``values`` (one per column) in the dtype of ``like`` and the
        kind of the caller's input (one value for a vector input); counted as
        ``device_host`` with ``stats`` off the host."""

    def numbers(self, a: Any, stats=None) -> tuple[np.ndarray | None, str | None]:
        """A host copy of ``allreduce``'s input as numbers, or what is wrong with it."""

    def numbers_like(self, arr: np.ndarray, a: Any, stats=None) -> Any:
        """``allreduce``'s host result ``arr`` as the kind of its input ``a``."""


class Request(Protocol):
    """A posted exchange; ``Wait()`` completes it (MPI's spelling)."""

    def Wait(self) -> None: ...  # noqa: N802 (MPI's name)


@runtime_checkable
class Link(Protocol):
    """The data-plane collectives of one communicator of a grid, on backend arrays.

    Counts are in rows of the arrays' first dimension (``alltoallv`` of flat arrays: in
    elements); displacements are exclusive prefix sums of the counts. Every method is
    collective over the communicator."""

    size: int
    rank: int

    def ialltoallv(self, send: Array, send_counts: np.ndarray, recv: Array,
                   recv_counts: np.ndarray, stats=None) -> Request: ...

    def alltoallv(self, send: Array, send_counts: np.ndarray, recv: Array,
                  recv_counts: np.ndarray, stats=None) -> None: ...

    def bcast(self, buf: Array, root: int, stats=None) -> None: ...

    def reduce(self, buf: Array, root: int, stats=None) -> None:
        """Sum ``buf`` over the ranks onto ``root``'s ``buf`` (in place there; elsewhere
        ``buf`` is left undefined)."""

    def allreduce(self, buf: Array, op: str = "sum", stats=None) -> None: ...

    def reduce_scatter(self, send: Array, recv: Array, counts: np.ndarray,
                       stats=None) -> None: ...

    def allgatherv(self, send: Array, recv: Array, counts: np.ndarray,
                   stats=None) -> None: ...

    def iallreduce(self, buf: Array, op: str = "sum", stats=None, name: str = "") -> Request:
        """Post ``allreduce(buf)``; ``Wait()`` before reading ``buf`` (or writing it)."""

    def ireduce_scatter(self, send: Array, recv: Array, counts: np.ndarray, stats=None,
                        name: str = "") -> Request:
        """Post ``reduce_scatter``; ``Wait()`` before reading ``recv`` (``send`` untouched
        until then, and undefined after)."""


@runtime_checkable
class DenseOps(Protocol):
    """The dense operations of a training step, part of every ``Backend``: torch tensors in
    and out (on the host backend CPU tensors sharing numpy memory), differentiable where a
    step differentiates them. The host backend runs them as before there was a backend
    (OpenBLAS, numba: the same bits); the torch backend by torch's operations on its device.
    The dropout masks are keyed by global vertex ids (the same masks on any layout)."""

    def place(self, t: Any) -> Any:
        """A tensor or module where this backend's tensors live."""

    def of_tensor(self, t: Any) -> Array:
        """The backend array sharing tensor ``t``'s memory (what a ``Link`` takes)."""

    def vertex_ids(self, ids: Any) -> Any:
        """Global vertex ids where the dropout reads them (convert once, pass often)."""

    def linear(self, h: Any, w: Any, b: Any = None, add: Any = None) -> Any:
        """``h @ w (+ b) (+ add)``."""

    def relu_dropout(self, z: Any, ids: Any, p: float, seed: int, step: int, layer: int,
                     bias: Any = None, col0: int = 0) -> Any:
        """``dropout(relu(z + bias))``; column k of ``z`` is feature ``col0 + k``."""

    def vertex_dropout(self, x: Any, ids: Any, p: float, seed: int, step: int,
                       layer: int) -> Any:
        """Dropout of the rows ``x`` (one per vertex id)."""

    def dropout_mask(self, ids: Any, f: int, p: float, seed: int, step: int,
                     layer: int) -> Any:
        """The float32 ``len(ids) x f`` mask: ``1/(1-p)`` kept, 0 dropped."""

    def loss_sum(self, logits: Any, labels: Any, rows: Any) -> Any:
        """Sum of the cross-entropy of the rows ``rows`` (indices)."""

    def evaluation_sums(self, logits: Any, labels: Any, rows: list,
                        stats=None) -> np.ndarray:
        """Per split (``rows``: each split's indices) the loss sum and the number of correct
        predictions, float64 on the host."""

    def adam_step(self, p: Any, grad: Any, state: dict, lr: float, betas, eps: float,
                  wd: float) -> None:
        """One Adam step of ``p`` (``state``: the advanced step counter, the moments)."""

    def training_memory(self, comm) -> int | None:
        """Collective: the device memory this rank may train in (None: no device)."""
