"""The host backend: numpy arrays, the numba kernels of ``spmmgnn.local``, MPI reading and
writing the arrays in place. Every method is the call the algorithms made before there was
a backend, with the same arguments, so the host path's results are bit for bit what they
were."""

from __future__ import annotations

import numpy as np
import scipy.linalg

from ..local import kernels
from ..local.local_matrix import LocalCSR
from ..runtime.buffers import BufferPool, recycled_empty
from ..runtime.threads import BLAS_ROWS, blas_enter, blas_exit, get_threads
from .convert import FLOAT_DTYPES, is_torch, like_input, number_array, numbers_like, to_numpy

GRAM_ROWS = 4096  # rows of float32 cast to float64 at a time by gram64


class HostTile:
    """A CSR tile given by its arrays (a SUMMA or Plexus tile), multiplied by the kernels
    that multiply them in place: ``csr_matmul_unrolled`` and ``csr_t_matmul``."""

    def __init__(self, indptr: np.ndarray, indices: np.ndarray, data: np.ndarray,
                 shape: tuple[int, int]):
        self.indptr, self.indices, self.data, self.shape = indptr, indices, data, shape
        self.nnz = int(indices.size)

    def matmul(self, x: np.ndarray, out: np.ndarray, accumulate: bool) -> None:
        kernels.csr_matmul_unrolled(self.indptr, self.indices, self.data, x, out,
                                    kernels.row_chunks(self.indptr, 4 * get_threads()),
                                    accumulate)

    def t_matmul(self, y: np.ndarray, out: np.ndarray, accumulate: bool) -> None:
        n_par = kernels.column_split(y.shape[1])
        kernels.csr_t_matmul(self.indptr, self.indices, self.data, y, out, accumulate, n_par,
                             kernels.row_split(n_par))

    def drop_transpose(self) -> None:
        pass


class HostBackend:
    """numpy + numba on the CPU (``ProcessGrid(device=None)``, the default)."""

    name = "host"
    device = None
    host_memory = True
    mpi_native = True  # its arrays are MPI buffers as they are
    dist_backend = "gloo"  # torch.distributed's backend for its arrays (CPU memory)
    dropout_impl = "numba"  # bias + ReLU + dropout: local.dense_kernels

    def __repr__(self) -> str:
        return "HostBackend()"

    @staticmethod
    def default_transport(size: int) -> str:
        """``transport="auto"``'s choice: MPI, which reads numpy arrays in place."""
        return "mpi"

    # ------------------------------------------------------------ arrays
    @staticmethod
    def pool() -> BufferPool:
        return BufferPool()

    @staticmethod
    def empty(shape, dtype) -> np.ndarray:
        return np.empty(shape, dtype=dtype)

    @staticmethod
    def zeros(shape, dtype) -> np.ndarray:
        return np.zeros(shape, dtype=dtype)

    @staticmethod
    def out(shape, dtype) -> np.ndarray:
        """A call's result array: reused once nothing references it (``recycled_empty``)."""
        return recycled_empty(shape, dtype)

    @staticmethod
    def dtype(x: np.ndarray) -> np.dtype:
        return x.dtype

    @staticmethod
    def nbytes(x: np.ndarray) -> int:
        return x.nbytes

    @staticmethod
    def contiguous(x: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(x)

    @staticmethod
    def from_host(a: np.ndarray, stats=None) -> np.ndarray:
        return a

    @staticmethod
    def to_host(x: np.ndarray, stats=None) -> np.ndarray:
        return x

    @staticmethod
    def index(idx: np.ndarray) -> np.ndarray:
        return idx

    @staticmethod
    def is_native(x) -> bool:
        """Whether ``x`` is this backend's kind of array."""
        return type(x) is np.ndarray

    @staticmethod
    def is_contiguous(x: np.ndarray) -> bool:
        return x.flags.c_contiguous

    @staticmethod
    def well_formed(x: np.ndarray, rows: int, finite: bool = True) -> bool:
        """Whether ``x`` passes every local check of a call taking ``rows`` rows (2-D,
        C-contiguous, float32/float64, a column or more, no NaN/Inf unless ``finite`` is
        False) in one quick test; the others take the checks that say what is wrong."""
        return (x.ndim == 2 and x.shape[0] == rows and x.shape[1] > 0
                and x.dtype in FLOAT_DTYPES and x.flags.c_contiguous
                and not (finite and kernels.count_nonfinite(x)))

    @staticmethod
    def local_array(x, what: str) -> np.ndarray:
        """A caller's rows (numpy or a CPU tensor) as a C-contiguous numpy array."""
        return to_numpy(x, what)

    @staticmethod
    def like(y: np.ndarray, template):
        """A result ``y`` as the kind of the caller's input (numpy, or a CPU tensor)."""
        return like_input(y, template)

    @staticmethod
    def returned(y: np.ndarray, as_torch: bool, stats=None):
        """Host rows handed to the caller: numpy, or (``as_torch``) a tensor sharing them."""
        if as_torch:
            import torch

            return torch.from_numpy(y)
        return y

    # ------------------------------------------------------------ local work
    @staticmethod
    def block(m: LocalCSR) -> LocalCSR:
        return m

    @staticmethod
    def tile(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray,
             shape: tuple[int, int]) -> HostTile:
        return HostTile(indptr, indices, data, shape)

    @staticmethod
    def row_pointers(rows: np.ndarray, n_rows: int) -> np.ndarray:
        """CSR row pointers of sorted COO row ids (int64, on the host)."""
        indptr = np.zeros(n_rows + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=n_rows), out=indptr[1:])
        return indptr

    @staticmethod
    def gather_rows(x: np.ndarray, idx: np.ndarray, out: np.ndarray) -> None:
        kernels.gather_rows(x, idx, out)

    @staticmethod
    def scatter_add(rows: np.ndarray, idx: np.ndarray, out: np.ndarray) -> None:
        kernels.scatter_add(rows, idx, out, kernels.column_split(rows.shape[1]))

    @staticmethod
    def take_at(x: np.ndarray, idx: np.ndarray) -> np.ndarray:
        """``x[idx]``, a new array (``idx``: an int64 index array of any shape that the
        caller keeps for the plan's life)."""
        return x[idx]

    @staticmethod
    def put_at(out: np.ndarray, idx: np.ndarray, values: np.ndarray) -> None:
        """``out[idx] = values`` (``idx`` as ``take_at``'s)."""
        out[idx] = values

    @staticmethod
    def take_spans(x: np.ndarray, starts: np.ndarray, w: int) -> np.ndarray:
        """The (n x w) rows ``x[starts[i]:starts[i] + w]`` of a flat ``x``."""
        return x[starts[:, None] + np.arange(w)]

    @staticmethod
    def put_spans(out: np.ndarray, starts: np.ndarray, values: np.ndarray) -> None:
        """``out[starts[i]:starts[i] + w] = values[i]`` in a flat ``out`` (``values``:
        n x w)."""
        out[starts[:, None] + np.arange(values.shape[1])] = values

    @staticmethod
    def count_nonfinite(x: np.ndarray) -> int:
        return int(kernels.count_nonfinite(x))

    @staticmethod
    def view_bytes(buf: np.ndarray, dtype) -> np.ndarray:
        """A flat byte buffer read as ``dtype`` (numpy's dtype), no copy."""
        return buf.view(dtype)

    # ------------------------------------------------------------ codecs
    @staticmethod
    def encode(codec, x, idx, out, key: int) -> int:
        return codec.encode(x, idx, out, key)

    @staticmethod
    def decode(codec, buf, out, idx, accumulate: bool) -> None:
        codec.decode(buf, out, idx, accumulate)

    # ------------------------------------------------------------ MPI's view of the data
    @staticmethod
    def wire_out(x: np.ndarray, stats=None, name: str = "",
                 reduction: bool = False) -> np.ndarray:
        return x

    @staticmethod
    def wire_in(recv: np.ndarray, stats=None, name: str = "",
                reduction: bool = False) -> np.ndarray:
        return recv

    @staticmethod
    def wire_landed(host: np.ndarray, recv: np.ndarray, stats=None,
                    reduction: bool = False) -> None:
        pass

    @staticmethod
    def wire_ready(send) -> None:
        pass

    @staticmethod
    def as_torch(x):
        """``x`` as a torch tensor sharing its memory (for torch.distributed)."""
        import torch

        return torch.from_numpy(x)

    @staticmethod
    def synchronize() -> None:
        pass

    # ------------------------------------------------------------ row algebra (linalg)
    @staticmethod
    def column_dots(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """``sum_i a[i, k] b[i, k]`` per column k, accumulated in float64 (one column:
        BLAS's dot, ``dot1``; more: einsum, which uses no BLAS)."""
        if a.shape[1] == 1:
            av = a.reshape(-1)
            return np.array([dot1(av, av if b is a else b.reshape(-1))])
        return np.einsum("ij,ij->j", a, b, dtype=np.float64)

    @staticmethod
    def nonzero_columns(a: np.ndarray) -> np.ndarray:
        """Per column: does it hold a non-zero?"""
        return np.any(a != 0, axis=0)

    @staticmethod
    def column_max_abs(a: np.ndarray) -> np.ndarray:
        """Per column: the largest magnitude (0 for no rows), float64."""
        return np.abs(a).max(axis=0, initial=0.0).astype(np.float64)

    @staticmethod
    def scaled_squares(a: np.ndarray, scale: np.ndarray) -> np.ndarray:
        """Per column k: ``sum_i (a[i, k] / scale[k])^2`` in float64."""
        return np.einsum("ij,ij->j", a / scale, a / scale, dtype=np.float64)

    @staticmethod
    def gram64(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """``a.T @ b`` accumulated in float64 (float32 rows cast a block at a time)."""
        if a.dtype == np.float64 and b.dtype == np.float64:
            return np.ascontiguousarray(a.T @ b)
        g = np.zeros((a.shape[1], b.shape[1]))
        for lo in range(0, a.shape[0], GRAM_ROWS):
            blk_a = a[lo:lo + GRAM_ROWS].astype(np.float64)
            blk_b = blk_a if b is a else b[lo:lo + GRAM_ROWS].astype(np.float64)
            g += blk_a.T @ blk_b
        return g

    @staticmethod
    def astype(x: np.ndarray, dtype) -> np.ndarray:
        """``x`` in ``dtype`` (``x`` itself when it has it)."""
        return x.astype(dtype, copy=False)

    @staticmethod
    def copy(x: np.ndarray) -> np.ndarray:
        return x.copy()

    @staticmethod
    def solve_right(a: np.ndarray, r: np.ndarray) -> np.ndarray:
        """``a @ inv(r)`` for upper triangular r, by a triangular solve."""
        return np.ascontiguousarray(scipy.linalg.solve_triangular(r, a.T, trans="T").T)

    @staticmethod
    def local_qr(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The reduced Householder QR of this rank's rows (LAPACK)."""
        return np.linalg.qr(a, mode="reduced")

    @staticmethod
    def take_rows(x: np.ndarray, idx: np.ndarray) -> np.ndarray:
        """A new C-contiguous array of ``x[idx]`` (``idx``: a list made for this call)."""
        return np.ascontiguousarray(x[idx])

    @staticmethod
    def put_rows(rows: np.ndarray, idx: np.ndarray, out: np.ndarray) -> None:
        """``out[idx] = rows`` (``idx``: a list kept for the plan's life, as ``index``)."""
        out[idx] = rows

    @staticmethod
    def reduced(values: np.ndarray, like: np.ndarray, template, vector: bool, stats=None):
        """A reduction's host ``values`` (one per column) in the dtype of ``like`` and the
        kind of the caller's input ``template``: one value for a vector input (a numpy
        scalar, or a 0-d tensor for a tensor)."""
        values = values.astype(like.dtype, copy=False)
        if vector:
            if not is_torch(template):
                return np.asarray(values).reshape(-1)[0]  # a numpy scalar of values' dtype
            return like_input(np.asarray(values).reshape(()), template)
        return like_input(np.ascontiguousarray(values), template)

    @staticmethod
    def numbers(a, stats=None) -> tuple[np.ndarray | None, str | None]:
        """A host copy of ``allreduce``'s input as numbers, or what is wrong with it."""
        return number_array(a)

    @staticmethod
    def numbers_like(arr: np.ndarray, a, stats=None):
        """``allreduce``'s result ``arr`` as the kind of its input ``a``."""
        return numbers_like(arr, a)


    # ------------------------------------------------------------ dense ops of a step
    # torch tensors in and out (autograd runs through them), CPU tensors sharing numpy memory
    @staticmethod
    def place(t):
        """``t`` (a tensor or a module) where this backend's tensors live: the CPU, as is."""
        return t

    @staticmethod
    def of_tensor(t) -> np.ndarray:
        """The backend array sharing tensor ``t``'s memory (a link's buffer): its numpy view."""
        return t.detach().numpy()

    @staticmethod
    def vertex_ids(ids) -> np.ndarray:
        """Global vertex ids as the dropout kernels read them (int64, contiguous)."""
        return np.ascontiguousarray(ids, dtype=np.int64)

    @staticmethod
    def linear(h, w, b=None, add=None):
        """``h @ w (+ b) (+ add)``, differentiable (``dense_host.Linear``: OpenBLAS, numba)."""
        from .dense_host import linear

        return linear(h, w, b, add)

    @staticmethod
    def relu_dropout(z, ids, p: float, seed: int, step: int, layer: int, bias=None,
                     col0: int = 0):
        """``dropout(relu(z + bias))`` with the vertex-keyed mask, one fused numba pass each
        way (``dense_host.relu_dropout``)."""
        from .dense_host import relu_dropout

        return relu_dropout(z, ids, p, seed, step, layer, bias=bias, col0=col0)

    @staticmethod
    def vertex_dropout(x, ids, p: float, seed: int, step: int, layer: int):
        """Dropout of rows ``x`` with the vertex-keyed mask (``dense_host.vertex_dropout``)."""
        from .dense_host import vertex_dropout

        return vertex_dropout(x, ids, p, seed, step, layer)

    @staticmethod
    def dropout_mask(ids, f: int, p: float, seed: int, step: int, layer: int):
        """The float32 ``len(ids) x f`` mask tensor: ``1/(1-p)`` kept, 0 dropped."""
        import torch

        from .dense_host import dropout_mask

        return torch.from_numpy(dropout_mask(ids, f, p, seed, step, layer))

    @staticmethod
    def loss_sum(logits, labels, rows):
        """Sum of cross-entropy over the rows ``rows`` (indices), differentiable
        (``dense_host.MaskedCrossEntropy``: one numba pass each way)."""
        from .dense_host import rows_loss_sum

        return rows_loss_sum(logits, labels, rows)

    @staticmethod
    def evaluation_sums(logits, labels, rows: list, stats=None) -> np.ndarray:
        """Per split (``rows``: each split's row indices) the loss sum and the correct
        predictions of this rank's rows, float64 on the host."""
        from .dense_host import evaluation_sums

        return evaluation_sums(logits, labels, rows)

    @staticmethod
    def adam_step(p, grad, state: dict, lr: float, betas, eps: float, wd: float) -> None:
        """One Adam step of ``p`` (``state``: step, advanced already, and the moments): the
        fused numba pass (``dense_host.adam_step``)."""
        from .dense_host import adam_step

        adam_step(p, grad, state, lr, betas, eps, wd)

    @staticmethod
    def training_memory(comm) -> int | None:
        """Collective over ``comm``: the bytes of device memory this rank may train in (None:
        no device; the host's memory is checked by the model's own preflight)."""
        return None


HOST = HostBackend()


def dot1(a: np.ndarray, b: np.ndarray) -> float:
    """The dot of two vectors by BLAS, accumulated in float64 (~1 us on 64 rows against
    ~5 us for einsum). One of ``BLAS_ROWS`` rows or more runs at the library's BLAS
    threads (``blas_enter``): numpy's OpenBLAS would run it on every core it found,
    whatever the ranks sharing them, its idle threads spinning after the call unless
    ``import spmmgnn`` loaded numpy (at P = 2 on 2 cores: 40-76 ms a call against ~0.1 ms)."""
    if a.dtype != np.float64:
        same = b is a
        a = a.astype(np.float64)
        b = a if same else b.astype(np.float64)
    if a.shape[0] < BLAS_ROWS:  # one BLAS thread whatever its setting
        return a @ b
    changed = blas_enter()
    try:
        return a @ b
    finally:
        blas_exit(changed)
