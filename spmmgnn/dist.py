"""``DistSpMM``: a sparse n x n matrix spread by block rows over a ProcessGrid, multiplied
with tall-skinny dense matrices whose rows are spread the same way.

Construction is collective and builds the plan once (layout, local splits, halo plan, index
lists, counts); ``matmul`` / ``matmul_t`` only move and multiply numbers. Subclasses in
``spmmgnn.algorithms`` implement one paper algorithm each.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from .convert import FLOAT_DTYPES, like_input, mpi_float_type, to_numpy
from .errors import SpmmgnnError, agree, check_on_root
from .grid import ProcessGrid
from .layout import Partition, resolve_partition
from .stats import CommStats

ALGORITHMS: dict[str, type[DistSpMM]] = {}


def register(name: str):
    def deco(cls):
        cls.name = name
        ALGORITHMS[name] = cls
        return cls
    return deco


def _load_algorithms() -> None:
    from . import algorithms  # noqa: F401  (registers the classes)


def _check_matrix(A, k: int, partition):
    """Root-side validation and relabelling of the user's matrix."""
    if not sp.issparse(A):
        raise SpmmgnnError(f"A must be a scipy.sparse matrix, got {type(A).__name__}")
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise SpmmgnnError(f"A must be square (n x n), got shape {A.shape}")
    A = sp.csr_array(A)
    if A.dtype.kind not in "fiub":
        raise SpmmgnnError(f"A must hold real numbers, got dtype {A.dtype}")
    A = A.astype(np.float64)
    if A.nnz and not np.all(np.isfinite(A.data)):
        raise SpmmgnnError("A has NaN or Inf entries")
    part = resolve_partition(partition, A.shape[0], k)
    if not part.is_identity:
        A = A[part.perm][:, part.perm]
    A = sp.csr_array(A)
    A.sum_duplicates()
    A.sort_indices()
    return A, part


class DistSpMM:
    """Distributed SpMM operator. Use ``DistSpMM.from_scipy`` (or ``from_block_row``)."""

    name: ClassVar[str] = "base"

    def __init__(self, grid: ProcessGrid, partition: Partition, block_row: sp.csr_array,
                 **options):
        self.grid = grid
        self.partition = partition
        self.offsets = partition.offsets
        self.n = int(partition.offsets[-1])
        self.block = grid.block_row
        self.lo = int(self.offsets[self.block])
        self.hi = int(self.offsets[self.block + 1])
        self.n_local = self.hi - self.lo
        self.stats = CommStats()
        self.validate = bool(options.pop("validate", True))
        if {"codec", "codec_backward"} & set(options):
            raise SpmmgnnError(f"codecs compress the row exchange of the sparse algorithms "
                               f"(sparse1d, sparse15d); {self.name} broadcasts whole blocks")
        if options:
            raise SpmmgnnError(f"{self.name}: unknown options {sorted(options)}")

    # ---------------------------------------------------------------- construction
    @classmethod
    def from_scipy(cls, A, grid: ProcessGrid | None = None, algorithm: str = "sparse1d",
                   partition=None, root: int = 0, **options) -> DistSpMM:
        """Collective. Root passes scipy sparse ``A`` (others may pass None).

        ``partition``: None (near-equal contiguous blocks), a list of block sizes, a part
        vector (vertices are relabelled so blocks are contiguous; the permutation is kept) or
        a ``Partition``; only root's value is used.
        """
        grid = grid or ProcessGrid()
        comm = grid.comm
        algo_cls = cls._algorithm_class(algorithm, comm)
        got = check_on_root(comm, root, lambda: _check_matrix(A, grid.n_block_rows, partition))
        Ap, part = got if got is not None else (None, None)
        part = comm.bcast(part, root=root) if comm.Get_size() > 1 else part
        block_row = _scatter_block_rows(comm, grid, root, Ap, part)
        return algo_cls(grid, part, block_row, **options)

    @classmethod
    def from_block_row(cls, block_row, grid: ProcessGrid, partition: Partition,
                       algorithm: str = "sparse1d", **options) -> DistSpMM:
        """Collective. Each rank passes its own block row (CSR, relabelled global columns).

        This is the path for data read block by block from disk: no rank holds all of A.
        """
        algo_cls = cls._algorithm_class(algorithm, grid.comm)
        error = None
        b = grid.block_row
        rows = int(partition.offsets[b + 1] - partition.offsets[b])
        if not sp.issparse(block_row) or block_row.shape != (rows, partition.n):
            shape = getattr(block_row, "shape", None)
            error = (f"block row {b} must be a sparse {rows} x {partition.n} matrix, got "
                     f"{type(block_row).__name__} of shape {shape}")
        elif partition.k != grid.n_block_rows:
            error = (f"partition has {partition.k} blocks but the grid has "
                     f"{grid.n_block_rows} block rows (P/c)")
        agree(grid.comm, error)
        return algo_cls(grid, partition, sp.csr_array(block_row, dtype=np.float64), **options)

    @staticmethod
    def _algorithm_class(algorithm: str, comm: MPI.Comm) -> type[DistSpMM]:
        _load_algorithms()
        error = None
        if algorithm not in ALGORITHMS:
            error = f"unknown algorithm {algorithm!r}; choose one of {sorted(ALGORITHMS)}"
        agree(comm, error)
        return ALGORITHMS[algorithm]

    # ---------------------------------------------------------------- rows in / out
    def scatter_rows(self, X, root: int = 0):
        """Collective. Root passes the full n x f matrix in original vertex order; every rank
        gets its block row's rows (numpy or torch, like root's input)."""
        comm = self.grid.comm

        def check():
            x = to_numpy(X)
            if x.ndim == 1:
                x = x.reshape(-1, 1)
            if x.ndim != 2 or x.shape[0] != self.n:
                raise SpmmgnnError(f"scatter_rows: X must have {self.n} rows, got shape "
                                   f"{tuple(x.shape)}")
            if x.dtype not in FLOAT_DTYPES:
                raise SpmmgnnError(f"X must be float32 or float64, got {x.dtype}")
            return np.ascontiguousarray(x[self.partition.perm]), x.shape[1], x.dtype.str

        got = check_on_root(comm, root, check)
        xp, f, dt = got if got is not None else (None, None, None)
        f, dt, as_torch = comm.bcast((f, dt, _is_torch(X)), root=root)
        local = np.empty((self.n_local, f), dtype=np.dtype(dt))
        self._rows_collective(xp, local, root, scatter=True)
        return _as_kind(local, as_torch)

    def gather_rows(self, Y_local, root: int = 0):
        """Collective. Returns the full matrix in original vertex order on root, None elsewhere."""
        comm = self.grid.comm
        y = self._check_local(Y_local, "gather_rows")
        as_torch = _is_torch(Y_local)
        full = np.empty((self.n, y.shape[1]), dtype=y.dtype) if comm.Get_rank() == root else None
        self._rows_collective(full, y, root, scatter=False)
        if full is None:
            return None
        out = np.empty_like(full)
        out[self.partition.perm] = full
        return _as_kind(out, as_torch)

    def _rows_collective(self, full, local, root: int, scatter: bool) -> None:
        """Scatterv/Gatherv of block rows between root and the replicas of root's replica
        index (column communicator), then a broadcast inside each row communicator."""
        grid = self.grid
        root_row, root_rep = divmod(root, grid.replication)
        f = local.shape[1]
        mpitype = mpi_float_type(local.dtype)
        counts = np.diff(self.offsets) * f
        displs = self.offsets[:-1] * f
        if grid.replica == root_rep:
            spec = [full, (counts, displs), mpitype] if grid.rank == root else None
            if scatter:
                grid.col_comm.Scatterv(spec, [local, mpitype], root=root_row)
            else:
                grid.col_comm.Gatherv([local, mpitype], spec, root=root_row)
        if scatter and grid.replication > 1:
            grid.row_comm.Bcast([local, mpitype], root=root_rep)

    # ---------------------------------------------------------------- multiply
    def matmul(self, X_local):
        """Collective. This rank's rows of ``A @ X``, given this rank's rows of X."""
        x = self._check_local(X_local, "matmul")
        out = np.empty((self.n_local, x.shape[1]), dtype=x.dtype)
        self.stats.calls_matmul += 1
        self._matmul(x, out)
        return like_input(out, X_local)

    def matmul_t(self, Y_local):
        """Collective. This rank's rows of ``A.T @ Y``, given this rank's rows of Y."""
        y = self._check_local(Y_local, "matmul_t")
        out = np.empty((self.n_local, y.shape[1]), dtype=y.dtype)
        self.stats.calls_matmul_t += 1
        self._matmul_t(y, out)
        return like_input(out, Y_local)

    def _matmul(self, x: np.ndarray, out: np.ndarray) -> None:
        raise NotImplementedError

    def _matmul_t(self, y: np.ndarray, out: np.ndarray) -> None:
        raise NotImplementedError

    def _check_local(self, x, what: str) -> np.ndarray:
        """Validate this rank's rows; collective (one small allreduce) unless validate=False,
        so a wrong shape on one rank is an error everywhere instead of a hang."""
        arr = to_numpy(x)
        if not self.validate:
            return arr
        error = None
        if arr.ndim != 2 or arr.shape[0] != self.n_local:
            error = (f"{what}: expected this rank's {self.n_local} rows as a 2-D array, got "
                     f"shape {tuple(arr.shape)}")
        elif arr.dtype not in FLOAT_DTYPES:
            error = f"{what}: expected float32 or float64, got {arr.dtype}"
        elif arr.shape[1] < 1:
            error = f"{what}: the dense matrix needs at least one column"
        elif not np.all(np.isfinite(arr)):
            error = f"{what}: input has NaN or Inf values"
        comm = self.grid.comm
        if comm.Get_size() == 1:
            agree(comm, error)
            return arr
        f = arr.shape[1] if arr.ndim == 2 else 0
        probe = np.array([error is not None, f, -f, arr.itemsize, -arr.itemsize], dtype=np.int64)
        seen = np.empty_like(probe)
        comm.Allreduce(probe, seen, op=MPI.MAX)
        mismatch = seen[1] != -seen[2] or seen[3] != -seen[4]
        if seen[0] or mismatch:
            if error is None and mismatch:
                error = f"{what}: ranks disagree on the number of columns or the dtype"
            agree(comm, error)
        return arr

    # ---------------------------------------------------------------- reporting
    def comm_stats(self) -> dict:
        """This rank's cumulative counters (bytes, calls, seconds) as a dict."""
        d = self.stats.as_dict()
        d.update(algorithm=self.name, rank=self.grid.rank, rows=self.n_local)
        return d

    def reset_stats(self) -> None:
        self.stats.reset()

    def local_nnz(self) -> int:
        raise NotImplementedError


def _is_torch(x) -> bool:
    from .convert import is_torch
    return is_torch(x)


def _as_kind(y: np.ndarray, as_torch: bool):
    if as_torch:
        import torch
        return torch.from_numpy(y)
    return y


def _scatter_block_rows(comm: MPI.Comm, grid: ProcessGrid, root: int, A, part: Partition):
    """Root sends every rank the CSR rows of its block row (replicas get the same rows)."""
    me = comm.Get_rank()
    offsets = part.offsets
    if me == root:
        mine = None
        for dest in range(comm.Get_size()):
            b = dest // grid.replication
            piece = A[int(offsets[b]):int(offsets[b + 1])]
            if dest == root:
                mine = piece
                continue
            comm.send((piece.shape, int(piece.nnz)), dest=dest, tag=11)
            comm.Send([piece.indptr.astype(np.int64), MPI.INT64_T], dest=dest, tag=12)
            comm.Send([piece.indices.astype(np.int64), MPI.INT64_T], dest=dest, tag=13)
            comm.Send([piece.data, MPI.DOUBLE], dest=dest, tag=14)
        return sp.csr_array(mine)
    shape, nnz = comm.recv(source=root, tag=11)
    indptr = np.empty(shape[0] + 1, dtype=np.int64)
    indices = np.empty(nnz, dtype=np.int64)
    data = np.empty(nnz, dtype=np.float64)
    comm.Recv([indptr, MPI.INT64_T], source=root, tag=12)
    comm.Recv([indices, MPI.INT64_T], source=root, tag=13)
    comm.Recv([data, MPI.DOUBLE], source=root, tag=14)
    return sp.csr_array((data, indices, indptr), shape=shape)
