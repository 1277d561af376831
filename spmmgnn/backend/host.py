"""The host backend: numpy arrays, the numba kernels of ``spmmgnn.local``, MPI reading and
writing the arrays in place. Every method is the call the algorithms made before there was
a backend, with the same arguments, so the host path's results are bit for bit what they
were."""

from __future__ import annotations

import numpy as np

from ..local import kernels
from ..local.local_matrix import LocalCSR
from ..runtime.buffers import BufferPool, recycled_empty
from ..runtime.threads import get_threads
from .convert import FLOAT_DTYPES, like_input, to_numpy


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
    def wire_out(x: np.ndarray, stats=None, name: str = "") -> np.ndarray:
        return x

    @staticmethod
    def wire_in(recv: np.ndarray, stats=None, name: str = "") -> np.ndarray:
        return recv

    @staticmethod
    def wire_landed(host: np.ndarray, recv: np.ndarray, stats=None) -> None:
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
