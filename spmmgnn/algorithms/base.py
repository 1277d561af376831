"""``DistSpMM``: a sparse m x n matrix A spread by block rows over a ProcessGrid, multiplied
with tall-skinny dense matrices whose rows are spread the same way.

Two layouts, as PETSc's MPIAIJ has: the *row layout* places the m rows of A and of the
output ``A @ X`` (``partition``), the *column layout* places the n rows of the input X
(``col_partition``). Block row i of both lives on the ranks of grid block row i. A square A
uses one layout for both unless told otherwise. ``matmul_t`` swaps the sides: its input is
laid out like the rows of A, its output like the columns.

Construction is collective and builds the plan once (layouts, local splits, halo plan, index
lists, counts); ``matmul`` / ``matmul_t`` only move and multiply numbers. Each subclass in
this package implements one paper algorithm; the registry ``ALGORITHMS`` (filled by the
package's ``__init__``) maps names to classes.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from .. import kernels
from ..buffers import recycled_empty
from ..convert import FLOAT_DTYPES, is_torch, like_input, mpi_float_type, to_numpy
from ..device import device_error, to_device, to_host
from ..errors import (
    SpmmgnnError,
    agree,
    check_on_root,
    collective_error,
    wait_for_root,
    wait_quietly,
)
from ..grid import ProcessGrid, format_shape, near_square, parse_grid
from ..hashing import mix64, uniform_by_id
from ..layout import Partition, bcast_partition, resolve_partition
from ..node_exchange import EXCHANGES, exchange_plan
from ..persistent import Owned, available
from ..reorder import block_rcm, with_order
from ..stats import CommStats
from ..threads import ensure_threads, scope, serial_enter, serial_exit
from ..tiers import network
from ..wire import bcast_json
from .linalg import RowAlgebra, well_formed

ALGORITHMS: dict[str, type[DistSpMM]] = {}
SERIAL_WORK = kernels.SERIAL_WORK  # (non-zeros + rows) x columns of a call on one thread below
SIDES = ("input", "output")
# what check_local agrees on: the operator's calls and the row algebra's (linalg.py)
CALLS = ("matmul", "matmul_t", "gather_rows", "scatter_rows", "dot", "norm", "gram", "qr",
         "fetch_rows", "allgather_rows")


def _check_matrix(A, k: int, partition, col_partition, reorder: str | None = None,
                  normalize: str | None = None):
    """Root-side validation, normalization and relabelling of the user's matrix."""
    if not sp.issparse(A):
        raise SpmmgnnError(f"A must be a scipy.sparse matrix, got {type(A).__name__}")
    if A.ndim != 2:
        raise SpmmgnnError(f"A must be two-dimensional, got shape {A.shape}")
    A = sp.csr_array(A)
    if A.dtype.kind not in "fiub":
        raise SpmmgnnError(f"A must hold real numbers, got dtype {A.dtype}")
    A = A.astype(np.float64)
    if A.nnz and not np.all(np.isfinite(A.data)):
        raise SpmmgnnError("A has NaN or Inf entries")
    if normalize is not None:
        A = _normalized(A, normalize)
    m, n = A.shape
    rows = resolve_partition(partition, m, k, what="partition (rows of A)")
    if col_partition is None and m == n:
        cols = rows
    else:
        cols = resolve_partition(col_partition, n, k, what="col_partition (columns of A)")
    if reorder not in (None, "rcm"):
        raise SpmmgnnError(f"reorder must be None or 'rcm', got {reorder!r}")
    if not (rows.is_identity and cols.is_identity):
        A = A[rows.perm][:, cols.perm]
    A = sp.csr_array(A)
    if reorder == "rcm":
        if rows is not cols:
            raise SpmmgnnError("reorder='rcm' needs a square A with one layout for rows "
                               "and columns")
        order = block_rcm(A, rows.offsets)
        rows = cols = with_order(rows, order)
        A = sp.csr_array(A[order][:, order])
    A.sum_duplicates()
    A.sort_indices()
    return A, rows, cols


def _root_error(root, size: int) -> str | None:
    if isinstance(root, (int, np.integer)) and not isinstance(root, bool) and 0 <= root < size:
        return None
    return f"root={root!r} is not a rank of the grid: give a rank in 0..{size - 1}"


def _normalize_error(normalize) -> str | None:
    """What is wrong with ``normalize=`` (None: nothing); checked on every rank."""
    if normalize is None or normalize in ("gcn", "mean"):
        return None
    return f"normalize must be None, 'gcn' or 'mean', got {normalize!r}"


def _normalized(A: sp.csr_array, kind: str) -> sp.csr_array:
    """``data.normalize``'s normalization of the whole matrix (root only)."""
    from ..data.normalize import normalize as normalize_matrix

    if kind == "gcn" and A.shape[0] != A.shape[1]:
        raise SpmmgnnError(f"normalize='gcn' adds self loops and needs a square A, got shape "
                           f"{A.shape}; normalize='mean' takes any A")
    return sp.csr_array(normalize_matrix(A, kind))


class DistSpMM(RowAlgebra):
    """Distributed SpMM operator. Build with ``from_scipy``, ``from_block_row`` or
    ``from_edge_index`` (on this class with ``algorithm=``, or on an algorithm's class).
    Reductions, QR and rows by id over its layouts: ``linalg.RowAlgebra``.

    Attributes (read-only; "this rank" values differ per rank):

    * ``m``, ``n``, ``shape``: the global shape of A (m output rows, n input rows).
    * ``n_local``: this rank's rows of the output side (A, ``A @ X``, ``matmul_t``'s
      input); ``n_local_in``: of the input side (X, ``A.T @ Y``). ``row_ids(side)``: their
      global ids in the caller's numbering.
    * ``partition`` / ``col_partition``: the row (output) and column (input) layouts, each
      a ``Partition`` (``offsets``, ``perm``, ``k``); ``row_offsets`` / ``col_offsets``
      their offsets; ``lo:hi`` / ``col_lo:col_hi`` this rank's block, relabelled.
    * ``grid`` (the ProcessGrid), ``block`` (this rank's block row), ``symmetric`` (True,
      False, or None until ``probe_symmetry()``), ``validate``, ``name``, ``stats``.
    """

    name: ClassVar[str] = "base"
    # capabilities, read by the trainer, the volume model and the sweep (never the name):
    grid_kinds: ClassVar[tuple[str, ...]] = ("1d",)  # the ProcessGrid kinds it runs on
    takes_codecs: ClassVar[bool] = False     # codec= / codec_backward= compress its exchange
    delayed_remote: ClassVar[bool] = False   # DistGNN cd-R / 0c can wrap it (delayed.py)
    stale_remote: ClassVar[bool] = False     # its remote rows may be stale (delayed views)
    takes_exchange: ClassVar[bool] = False   # exchange="node" / "auto" (node_exchange.py)
    runs_on_device: ClassVar[bool] = False   # ProcessGrid(device=...) (on_device.py)

    def __init__(self, grid: ProcessGrid, partition: Partition, block_row: sp.csr_array,
                 col_partition: Partition | None = None, validate: bool = True,
                 exchange: str = "flat", exchange_model: str | None = None, **unknown):
        self.check_grid(grid)
        # the options are agreed by every rank before construction: the same verdict on all
        if exchange not in EXCHANGES:
            raise collective_error(f"exchange must be one of {', '.join(EXCHANGES)}, got "
                                   f"{exchange!r}")
        if exchange != "flat" and not self.takes_exchange:
            raise collective_error(f"{self.name} has no halo exchange to make node-aware: "
                                   "exchange='flat' (the sparse algorithms take 'node', "
                                   "'auto')")
        try:
            network(exchange_model)
        except ValueError as exc:
            raise collective_error(f"exchange_model: {exc}") from None
        self.exchange, self.exchange_model = exchange, exchange_model
        if unknown:
            raise SpmmgnnError(f"{self.name}: unknown options {sorted(unknown)}"
                               + (" (codecs compress the row exchange of the sparse "
                                  "algorithms)" if {"codec", "codec_backward"} & set(unknown)
                                  else ""))
        self.grid = grid
        self.device = grid.device  # None: numpy/numba; else a torch device (on_device.py)
        self.device_path = None
        if self.device is not None and not self.runs_on_device:
            raise collective_error(
                f"{self.name} does not run on a device grid (device={grid.device}); the "
                f"algorithms that do: {', '.join(device_families())} (or build the grid with "
                "device=None for the numpy path)")
        self.partition = partition
        self.col_partition = partition if col_partition is None else col_partition
        self.row_offsets = partition.offsets
        self.col_offsets = self.col_partition.offsets
        self.m, self.n = int(self.row_offsets[-1]), int(self.col_offsets[-1])
        b = grid.block_row
        self.block = b
        self.lo, self.hi = int(self.row_offsets[b]), int(self.row_offsets[b + 1])
        self.col_lo, self.col_hi = int(self.col_offsets[b]), int(self.col_offsets[b + 1])
        self.n_local = self.hi - self.lo              # rows of A @ X (and of Y in matmul_t)
        self.n_local_in = self.col_hi - self.col_lo    # rows of X (and of A.T @ Y)
        self.stats = CommStats()
        self.validate = bool(validate)
        self.symmetric: bool | None = None  # A.T == A; set by probe_symmetry() or the user
        self._auto_stream = 0
        grid.row_counts.update({(self.n_local, self.m), (self.n_local_in, self.n)})
        ensure_threads(grid.comm)

    @property
    def shape(self) -> tuple[int, int]:
        return self.m, self.n

    def row_ids(self, side: str = "output") -> np.ndarray:
        """Original (caller's) index of each local row: of A and ``A @ X`` (``"output"``),
        or of X and ``A.T @ Y`` (``"input"``, the columns of A)."""
        part, _ = self._side(side)
        return (part.ids(self.col_lo, self.col_hi) if side == "input" else
                part.ids(self.lo, self.hi))

    @property
    def offsets(self) -> np.ndarray:
        """Row layout block offsets (equal to the column layout's for square A)."""
        return self.row_offsets

    # ---------------------------------------------------------------- construction
    @classmethod
    def from_scipy(cls, A, grid: ProcessGrid | None = None, algorithm: str | None = None,
                   partition=None, col_partition=None, root: int = 0,
                   reorder: str | None = None, normalize: str | None = None,
                   **options) -> DistSpMM:
        """Collective. Root passes scipy sparse ``A`` (m x n; others may pass None).

        ``partition`` places the rows of A (and of ``A @ X``): None (near-equal contiguous
        blocks), a list of block sizes, a part vector (rows are relabelled so blocks are
        contiguous; the permutation is kept) or a ``Partition``. ``col_partition`` does the
        same for the columns of A (the rows of X); for square A it defaults to
        ``partition``, else to near-equal blocks. ``reorder="rcm"`` renumbers the vertices
        inside each block row by reverse Cuthill–McKee of its diagonal block (square A; the
        caller's order in and out is unchanged, see ``spmmgnn.reorder``). ``normalize``:
        ``"gcn"`` (``D^-1/2 (A + I) D^-1/2``, square A) or ``"mean"`` (``D^-1 A``), as in
        ``from_edge_index``. Only root's values are used.
        """
        grid = grid or ProcessGrid()
        comm = grid.comm
        agree(comm, _normalize_error(normalize) or _root_error(root, comm.Get_size()))
        algo_cls = cls._algorithm_class(algorithm, comm, dict(options, reorder=reorder))
        algo_cls.check_grid(grid)
        got = check_on_root(comm, root, lambda: _check_matrix(
            A, grid.n_block_rows, partition, col_partition, reorder, normalize))
        Ap, rows, cols = got if got is not None else (None, None, None)
        shape, nnz = bcast_json(comm, None if Ap is None else (list(Ap.shape), int(Ap.nnz)),
                                root)
        shape_nnz = (tuple(shape), nnz)
        rows = bcast_partition(comm, rows, root)
        cols = bcast_partition(comm, cols, root)
        agree(comm, algo_cls.preflight(grid, shape_nnz[0], shape_nnz[1], **options))
        block_row = _scatter_block_rows(comm, grid, root, Ap, rows)
        wait_for_root(comm)  # ranks served first sleep until root has cut the last block
        return algo_cls(grid, rows, block_row, col_partition=cols, **options)

    @classmethod
    def from_block_row(cls, block_row, grid: ProcessGrid, partition: Partition,
                       algorithm: str | None = None, col_partition: Partition | None = None,
                       **options) -> DistSpMM:
        """Collective. Each rank passes its own block row (CSR, relabelled global columns).

        This is the path for data read block by block from disk: no rank holds all of A.
        """
        algo_cls = cls._algorithm_class(algorithm, grid.comm, options)
        algo_cls.check_grid(grid)
        cols = partition if col_partition is None else col_partition
        error = None
        b = grid.block_row
        rows = int(partition.offsets[b + 1] - partition.offsets[b])
        if not sp.issparse(block_row) or block_row.shape != (rows, cols.n):
            shape = getattr(block_row, "shape", None)
            error = (f"block row {b} must be a sparse {rows} x {cols.n} matrix, got "
                     f"{type(block_row).__name__} of shape {shape}")
        elif partition.k != grid.n_block_rows or cols.k != grid.n_block_rows:
            error = (f"the layouts have {partition.k} and {cols.k} blocks but the grid has "
                     f"{grid.n_block_rows} block rows (P/c)")
        agree(grid.comm, error)
        nnz = int(grid.across_block_rows.allreduce(int(block_row.nnz), op=MPI.SUM))
        agree(grid.comm, algo_cls.preflight(grid, (partition.n, cols.n), nnz, **options))
        return algo_cls(grid, partition, sp.csr_array(block_row, dtype=np.float64),
                        col_partition=cols, **options)

    @classmethod
    def from_edge_index(cls, edge_index, num_nodes: int, grid: ProcessGrid | None = None,
                        algorithm: str | None = None, edge_weight=None,
                        normalize: str | None = None, root: int = 0, **options) -> DistSpMM:
        """Collective. A graph in PyTorch Geometric's convention: ``edge_index[0]`` are
        sources, ``edge_index[1]`` targets, and aggregation happens at the target, so the
        operator is ``A[target, source] = weight`` (duplicates summed, like PyG's scatter-add).

        ``normalize="gcn"`` applies ``D^-1/2 (A + I) D^-1/2`` with remaining self loops (PyG's
        ``gcn_norm``), ``"mean"`` the row-stochastic mean. Only root's values are used;
        numpy arrays and torch tensors are accepted.
        """
        from ..data.pyg import edge_index_adjacency

        grid = grid or ProcessGrid()
        agree(grid.comm, _normalize_error(normalize))
        A = check_on_root(grid.comm, root,
                          lambda: edge_index_adjacency(edge_index, num_nodes, edge_weight))
        return cls.from_scipy(A, grid, algorithm=algorithm, root=root, normalize=normalize,
                              **options)

    @classmethod
    def grid_for(cls, comm: MPI.Comm, replication: int = 1,
                 shape: str | tuple[int, ...] | None = None,
                 ranks_per_node: int | None = None, device: str | None = None) -> ProcessGrid:
        """Collective: the grid this algorithm runs on, from the command line's flags:
        ``shape`` (``"2x3"`` or a tuple) for the 2D/3D algorithms (None: the factors of P
        closest to a square or cube), ``replication`` for the others; ``ranks_per_node``
        groups the ranks into nodes (None: by shared memory); ``device`` as ``ProcessGrid``'s.
        A flag the algorithm does not
        take is one error on every rank."""
        if isinstance(shape, str):
            try:
                shape = parse_grid(shape)
            except ValueError as exc:
                agree(comm, str(exc))
        wants = 3 if "3d" in cls.grid_kinds else 2 if "2d" in cls.grid_kinds else 0
        if not wants:
            agree(comm, None if shape is None else
                  f"{cls.name} runs on a P/c x c grid: drop --grid {format_shape(shape)} "
                  "(--replication sets c)")
            return ProcessGrid(comm, replication, ranks_per_node=ranks_per_node,
                               device=device)
        agree(comm, None if replication == 1 else
              f"{cls.name} runs on a {wants}D grid: drop --replication (--grid sets its shape)")
        return ProcessGrid(comm, shape=shape or near_square(comm.Get_size(), wants),
                           ranks_per_node=ranks_per_node, device=device)

    @classmethod
    def check_grid(cls, grid: ProcessGrid) -> None:
        """Collective without communication (every rank built the same grid): one error on
        every rank when this algorithm does not run on ``grid``'s kind."""
        if grid.kind in cls.grid_kinds:
            return
        raise collective_error(f"{cls.name} runs on a {' or '.join(cls.grid_kinds)} grid, not "
                               f"on this {grid.kind} grid ({grid.label()}): "
                               + grid_hint(cls, grid))

    @classmethod
    def preflight(cls, grid: ProcessGrid, shape: tuple[int, int], nnz: int,
                  **options) -> str | None:
        """Called on every rank before construction with the global shape, non-zeros and the
        construction options; an algorithm that cannot run (e.g. memory) returns the reason.
        Default: fine."""
        return None

    @classmethod
    def _algorithm_class(cls, algorithm: str | None, comm: MPI.Comm,
                         options: dict | None = None) -> type[DistSpMM]:
        """The class of ``algorithm``, after every rank agreed on the name and the options
        (before any algorithm-specific communication, which would hang or fail obscurely
        if the ranks built different operators)."""
        if algorithm is None:
            algorithm = "sparse1d" if cls is DistSpMM else cls.name
        error = None
        if algorithm not in ALGORITHMS:
            error = f"unknown algorithm {algorithm!r}; choose one of {sorted(ALGORITHMS)}"
        elif cls is not DistSpMM and ALGORITHMS[algorithm] is not cls:
            error = f"{cls.__name__}.from_*: algorithm={algorithm!r} names another class"
        if comm.Get_size() > 1:
            mine = _describe(algorithm, options or {})
            first = bcast_json(comm, mine, root=0)
            if error is None and mine != first:
                error = (f"the ranks build different operators: rank 0 asks for {first}, "
                         f"rank {comm.Get_rank()} for {mine}")
        agree(comm, error)
        return ALGORITHMS[algorithm]

    # ---------------------------------------------------------------- rows in / out
    def _side(self, side: str) -> tuple[Partition, int]:
        if side not in SIDES:
            raise SpmmgnnError(f"side must be 'input' or 'output', got {side!r}")
        return ((self.col_partition, self.n_local_in) if side == "input"
                else (self.partition, self.n_local))

    def scatter_rows(self, X, root: int = 0, side: str = "input"):
        """Collective. Root passes a full dense matrix in original order; every rank gets its
        block row's rows (numpy or torch, like root's input).

        ``side="input"``: X has n rows (the input of ``matmul``); ``"output"``: m rows (the
        input of ``matmul_t``)."""
        comm = self.grid.comm
        if self.validate:  # the same call, side and root on every rank before root's checks
            self.check_local(np.zeros((0, 0)), "scatter_rows", 0, side, root)
        part, n_local = self._side(side)

        def check():
            error = local_input_error(X, "scatter_rows", self.device)
            if error:
                raise SpmmgnnError(error)
            x = to_numpy(X, "scatter_rows")
            if x.ndim == 1:
                x = x.reshape(-1, 1)
            if x.ndim != 2 or x.shape[0] != part.n:
                raise SpmmgnnError(f"scatter_rows: X must have {part.n} rows ({side} side), "
                                   f"got shape {tuple(x.shape)}"
                                   + (self._side_hint(side) if x.ndim and self.m != self.n
                                      and x.shape[0] in (self.m, self.n) else ""))
            if x.dtype not in FLOAT_DTYPES:
                raise SpmmgnnError(f"X must be float32 or float64, got {x.dtype}")
            return np.ascontiguousarray(x[part.perm]), x.shape[1], x.dtype.str

        got = check_on_root(comm, root, check)
        xp, f, dt = got if got is not None else (None, None, None)
        f, dt, as_torch, vector = bcast_json(comm, (f, dt, is_torch(X),
                                                    getattr(X, "ndim", 0) == 1), root)
        local = np.empty((n_local, f), dtype=np.dtype(dt))
        self._rows_collective(xp, local, part.offsets, root, scatter=True)
        return _as_kind(local[:, 0] if vector else local, as_torch, self.device)

    def gather_rows(self, Z_local, root: int = 0, side: str = "output"):
        """Collective. The full matrix in original order on root, None elsewhere.

        ``side="output"``: this rank's rows of ``A @ X``; ``"input"``: of ``A.T @ Y``."""
        vector = getattr(Z_local, "ndim", 0) == 1
        z = self._check_side(Z_local.reshape(-1, 1) if vector else Z_local, "gather_rows",
                             side, root)
        part = self._side(side)[0]
        comm = self.grid.comm
        full = np.empty((part.n, z.shape[1]), dtype=z.dtype) if comm.Get_rank() == root else None
        self._rows_collective(full, z, part.offsets, root, scatter=False)
        if full is None:
            return None
        out = np.empty_like(full)
        out[part.perm] = full
        return _as_kind(out[:, 0] if vector else out, is_torch(Z_local), self.device)

    def _rows_collective(self, full, local, offsets: np.ndarray, root: int,
                         scatter: bool) -> None:
        """Scatterv/Gatherv of block rows between root and the ranks with root's replica
        index, then a broadcast to the other replicas of each block row."""
        grid = self.grid
        root_row, root_rep = divmod(root, grid.replication)
        f = local.shape[1]
        mpitype = mpi_float_type(local.dtype)
        counts = np.diff(offsets) * f
        displs = offsets[:-1] * f
        if grid.replica == root_rep:
            spec = [full, (counts, displs), mpitype] if grid.rank == root else None
            if scatter:
                grid.across_block_rows.Scatterv(spec, [local, mpitype], root=root_row)
            else:
                grid.across_block_rows.Gatherv([local, mpitype], spec, root=root_row)
        if scatter and grid.replication > 1:
            grid.across_replicas.Bcast([local, mpitype], root=root_rep)

    # ---------------------------------------------------------------- multiply
    def matmul(self, X_local, stream: int | None = None):
        """Collective. This rank's rows of ``A @ X``, given this rank's rows of X.

        ``stream`` keys the stochastic rounding of a codec (same stream, same bits: a
        resumed run repeats the uninterrupted one); None draws the next value of a
        per-operator counter."""
        if self.device_path is not None:
            return self.device_path.call(X_local, stream, transposed=False)
        vector = getattr(X_local, "ndim", 0) == 1
        x = self.check_local(X_local.reshape(-1, 1) if vector else X_local, "matmul",
                             self.n_local_in)
        out = recycled_empty((self.n_local, x.shape[1]), x.dtype)
        self.stats.calls_matmul += 1
        key = self.rounding_key(stream, 0) if self.keyed() else 0
        self._in_threads(self._matmul, x, out, key)
        return like_input(out[:, 0] if vector else out, X_local)

    def matmul_t(self, Y_local, stream: int | None = None):
        """Collective. This rank's rows of ``A.T @ Y``, given this rank's rows of Y."""
        if self.device_path is not None:
            return self.device_path.call(Y_local, stream, transposed=True)
        vector = getattr(Y_local, "ndim", 0) == 1
        y = self.check_local(Y_local.reshape(-1, 1) if vector else Y_local, "matmul_t",
                             self.n_local)
        out = recycled_empty((self.n_local_in, y.shape[1]), y.dtype)
        self.stats.calls_matmul_t += 1
        key = self.rounding_key(stream, 1) if self.keyed() else 0
        self._in_threads(self._matmul_t, y, out, key)
        return like_input(out[:, 0] if vector else out, Y_local)

    def _in_threads(self, run, x: np.ndarray, out: np.ndarray, key: int) -> None:
        """``run(x, out, key)`` on the library's threads (one for a tiny call), the caller's
        after: ``scope(1)``'s setting without the scope object when one thread runs it."""
        limit = self.call_threads(x.shape[1])
        if limit != 1:
            with scope(limit):
                run(x, out, key)
            return
        before = serial_enter()
        try:
            run(x, out, key)
        finally:
            serial_exit(before)

    def call_threads(self, f: int) -> int | None:
        """1 for a call on f columns whose local work ((non-zeros + rows) x f) is below
        ``SERIAL_WORK``, else None (the library's threads): waking a second thread for a
        tiny product costs more than the product (a numba parallel region on a 64-row
        matrix took ~150 us against ~2 us on one thread at load ~17, bench/percall.py)."""
        serial_below = self.__dict__.get("_serial_below")  # the widest serial call + 1
        if serial_below is None:
            try:
                work = self.local_nnz() + self.n_local + self.n_local_in
            except NotImplementedError:
                work = SERIAL_WORK
            serial_below = self._serial_below = -(-SERIAL_WORK // max(1, work))
        return 1 if f < serial_below else None

    def keyed(self) -> bool:
        """Whether a codec reads the calls' rounding keys (``rounding_key``): without one the
        key is never used, and a call skips computing it (~1.3 us of Python hashing)."""
        found = self.__dict__.get("_keyed")
        if found is None:
            found = self._keyed = (getattr(self, "codec", None) is not None
                                   or getattr(self, "codec_backward", None) is not None)
        return found

    def rounding_key(self, stream: int | None, direction: int) -> int:
        """The key of a codec's stochastic rounding for one call: ``stream`` and the direction
        (0 ``matmul``, 1 ``matmul_t``), or the next of a hidden counter without a stream."""
        if stream is None:
            self._auto_stream += 1
            return mix64(0xA570, self._auto_stream, direction)
        return mix64(stream, direction)

    def _matmul(self, x: np.ndarray, out: np.ndarray, key: int) -> None:
        raise NotImplementedError

    def _matmul_t(self, y: np.ndarray, out: np.ndarray, key: int) -> None:
        raise NotImplementedError

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
        device = None if what == "scatter_rows" else self.device
        plain = device is None and type(x) is np.ndarray  # (no tensor, no device to check)
        if not self.validate:
            if plain and x.flags.c_contiguous:
                return x
            error = local_input_error(x, what, device)
            if error:
                raise SpmmgnnError(error)
            return to_numpy(x, what)
        comm = self.grid.comm
        if plain and side is None and type(root) is int and root == 0 \
                and well_formed(x, rows):
            # the common call, a C-contiguous float numpy block of the right rows without
            # NaN/Inf, passes every local check below: one process has nothing to agree on
            if comm.Get_size() == 1:
                return x
            arr, error = x, None
        else:
            arr, error = self.local_rows(x, what, None, device=device)
            if side is not None and side not in SIDES:
                error = error or f"{what}: side must be 'input' or 'output', got {side!r}"
            if isinstance(root, bool) or not isinstance(root, (int, np.integer)) \
                    or not 0 <= root < comm.Get_size():
                error = error or (f"{what}: root must be a rank of the grid's "
                                  f"{comm.Get_size()}, got {root!r}")
                root = -1
            if what != "scatter_rows":  # (after side and root: a bad side explains rows)
                error = error or _rows_error(arr, what, rows, side)
            if comm.Get_size() == 1:
                agree(comm, error)
                return arr
        # one MAX reduction of (error, v, -v) for v = width, itemsize, call, side, root
        # gives each v's largest and smallest value over the ranks
        f = arr.shape[1] if arr.ndim == 2 else 0
        probe, mine = _check_probe(error is not None, f, arr.itemsize, what, side, root)
        seen = self._reduce_probe(probe)
        if seen.tobytes() == mine:  # the maxima of v and -v are mine: every rank agrees
            return arr
        got = seen.tolist()
        spread = [(got[i], -got[i + 1]) for i in range(1, 11, 2)]
        differ = _call_disagreement(spread[2:])
        if differ:  # every rank computed it from the same reduced values
            raise collective_error(differ)
        if error is None and not seen[0] and any(hi != lo for hi, lo in spread[:2]):
            error = f"{what}: ranks disagree on the number of columns or the dtype"
        agree(comm, error)
        return arr

    def _reduce_probe(self, probe: np.ndarray) -> np.ndarray:
        """Collective: the MAX reduction of ``check_local``'s probe over the grid, through
        one persistent ``Allreduce`` made on the operator's first validated call (the same
        call on every rank: ``persistent``); the result is overwritten by the next call."""
        made = self.__dict__.get("_probe_reduce")
        if made is None and not available():  # an MPI 3 library: a plain Allreduce
            seen = np.empty_like(probe)
            self.grid.comm.Allreduce(probe, seen, op=MPI.MAX)
            return seen
        if made is None:
            send = np.zeros(PROBE_SIZE, dtype=np.int64)
            seen = np.empty_like(send)
            request = Owned(self).allreduce(self.grid.comm, send, seen, MPI.MAX)
            made = self._probe_reduce = (send, seen, request)
        send, seen, request = made
        send[:] = probe
        request.Start()  # (waited right below, every time: never left active)
        request.Wait()
        return seen

    @staticmethod
    def local_rows(x, what: str, rows: int | None, side: str | None = None,
                   device=None) -> tuple[np.ndarray, str | None]:
        """This rank's rows as numpy and what is wrong with them (None: nothing), without
        any communication: the local half of ``check_local`` (``rows=None``: any shape),
        for callers that fold the agreement into their own reduction (``linalg``)."""
        error = local_input_error(x, what, device)
        arr = _NOTHING
        if error is None:
            try:
                arr = to_numpy(x, what)
            except SpmmgnnError as exc:  # a meta tensor: refused on every rank
                error = str(exc)
        if rows is not None:
            error = error or _rows_error(arr, what, rows, side)
        return arr, error

    def probe_symmetry(self, seed: int = 12345) -> bool:
        """Collective: is ``A.T == A``? Compares ``A x`` with ``A.T x`` for two random vectors
        (float64; a non-symmetric A is caught with probability 1). Sets ``self.symmetric``;
        the statistics are left as they were. When symmetric, the transposed copies the
        probe built are freed (``matmul_t`` would build them again if called)."""
        same_layout = (self.partition is self.col_partition
                       or (np.array_equal(self.row_offsets, self.col_offsets)
                           and self.partition.same_order(self.col_partition)))
        if not same_layout:  # the same for every rank: no collective needed to agree
            self.symmetric = False
            return False
        saved = dataclasses.replace(self.stats)
        ids = np.arange(self.lo, self.hi, dtype=np.int64)
        x = np.column_stack([uniform_by_id(ids, seed + k) - 0.5 for k in range(2)])
        if self.device_path is None:
            ax, atx = self.matmul(x), self.matmul_t(x)
        else:  # the device's own products, compared on the host
            xd = to_device(x, self.device)
            ax, atx = to_host(self.matmul(xd)), to_host(self.matmul_t(xd))
        local = np.array([np.abs(ax - atx).max(initial=0.0), np.abs(ax).max(initial=0.0)])
        worst = np.empty_like(local)
        self.grid.comm.Allreduce(local, worst, op=MPI.MAX)
        self.stats.load(saved)
        self.symmetric = bool(worst[0] <= 1e-10 * max(worst[1], 1e-300))
        if self.symmetric:  # A.T y runs as A y from now on: the probe's transposes go
            for m in self.local_matrices():
                m.drop_transpose()
            if self.device_path is not None:
                self.device_path.drop_transposes()
        return self.symmetric

    def keep_values(self, dtype) -> None:
        """Keep the local matrices' values in ``dtype`` only (``LocalCSR.keep_values``): a
        float32 training run, once ``probe_symmetry`` has run in float64, frees the float64
        values (8 bytes per non-zero). A later call in float64 still works, on the float32
        values widened (exact casts, but the float32-rounded matrix)."""
        for m in self.local_matrices():
            m.keep_values(dtype)

    def release_exchange_buffers(self) -> None:
        """Collective in effect (every rank at the same point): free the pooled buffers of
        the row exchanges and their persistent requests (``Route.release_buffers``; a
        node-aware plan's shared windows too);
        the trainer drops the float64 probe's this way (3 arrays of ghost or send rows x 2
        float64). The next calls allocate what they use again."""
        for plan in self.exchange_plans():
            if hasattr(plan, "release_buffers"):
                plan.release_buffers()

    # ---------------------------------------------------------------- reporting
    def comm_stats(self) -> dict:
        """This rank's cumulative counters (bytes, calls, seconds) as a dict, with
        ``kernels``: how many of its local products ran each kernel variant."""
        d = self.stats.as_dict()
        d.update(algorithm=self.name, rank=self.grid.rank, rows=self.n_local,
                 kernels=kernel_counts(self.kernel_choices()), exchange=self.exchange_report())
        return d

    def exchange_plans(self) -> list:
        """The halo plans of this operator's row exchange (none for the oblivious ones)."""
        return []

    def halo_plan(self, comm: MPI.Comm, owner_offsets: np.ndarray, ghost_ids: np.ndarray,
                  codec=None, codec_backward=None, seed: int = 0, stream: int | None = None):
        """Collective: the halo plan of this operator's ``exchange`` option (flat, node-aware
        or auto) for ``ghost_ids`` on ``comm``, one of the grid's communicators, counting into
        ``self.stats``."""
        return exchange_plan(self.exchange, comm, owner_offsets, ghost_ids, self.stats, codec,
                             codec_backward, seed, stream, self.grid.node_map(comm),
                             self.exchange_model)

    def exchange_report(self) -> dict:
        """The ``exchange`` option and, with ``auto``, what each plan chose so far per
        direction and bytes per row (``{"bcast 256 B/row": "node"}``)."""
        chosen: dict[str, list[str]] = {}
        for plan in self.exchange_plans():
            for label, kind in getattr(plan, "choices", {}).items():
                chosen.setdefault(label, [])
                if kind not in chosen[label]:
                    chosen[label].append(kind)
        return dict(option=self.exchange,
                    chosen={k: "/".join(sorted(v)) for k, v in sorted(chosen.items())})

    def local_matrices(self) -> list:
        """The ``LocalCSR`` blocks this rank multiplies."""
        return self.product.matrices()

    def kernel_choices(self) -> list[dict]:
        """Each local block's kernel choices so far (``LocalCSR.kernel_report``), tagged
        with the block's position in ``local_matrices()``; a transposed CSR built for
        ``matmul_t`` reports as the same block."""
        rows = []
        for i, m in enumerate(self.local_matrices()):
            rows += [dict(block=i, **r) for r in m.kernel_report()]
            if m.transposed is not None:
                rows += [{**r, "block": i, "op": "A^T x: transposed CSR x"}
                         for r in m.transposed.kernel_report()]
        return rows

    def reset_stats(self) -> None:
        self.stats.reset()

    def local_nnz(self) -> int:
        raise NotImplementedError


def grid_hint(cls: type[DistSpMM], grid: ProcessGrid) -> str:
    """How to run ``cls``: the grid it needs, or the algorithms this grid runs."""
    kinds = cls.grid_kinds
    if "2d" in kinds or "3d" in kinds:
        n = 2 if "2d" in kinds else 3
        return (f"build the grid with shape=({', '.join(['pr', 'pc', 'pl'][:n])}) "
                f"(--grid {'x'.join(['2'] * n)} on the command line)")
    others = sorted(name for name, c in ALGORITHMS.items() if grid.kind in c.grid_kinds)
    if grid.kind == "1.5d":
        return f"use replication=1 (--replication 1), or one of {others} for c > 1"
    return f"use replication=c or no grid shape, or one of {others} on this grid"


def kernel_counts(choices: list[dict]) -> dict[str, int]:
    """``{"A x unrolled (measured)": 2, ...}``: how many (block, width) products ran each
    variant, and how it was chosen."""
    counts: dict[str, int] = {}
    for c in choices:
        key = f"{c['op']} {c['variant']} ({c['source']})"
        counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items()))


_PROBES: dict[tuple, tuple[np.ndarray, bytes]] = {}
PROBE_SIZE = 11  # [failed, v, -v for v = width, itemsize, call, side, root]


def _check_probe(failed: bool, f: int, itemsize: int, what: str, side: str | None,
                 root: int) -> tuple[np.ndarray, bytes]:
    """``check_local``'s all-reduce probe ``[failed, v, -v for v = width, itemsize, call,
    side, root]`` and its bytes, made once per distinct call (read-only: MPI only sends
    it). With no rank failed, the MAX reduction equals the probe exactly when every rank
    sent the same values."""
    s = -1 if side is None else SIDES.index(side) if side in SIDES else -2
    key = (failed, f, itemsize, what, s, root)
    found = _PROBES.get(key)
    if found is None:
        c = CALLS.index(what)
        probe = np.array([failed, f, -f, itemsize, -itemsize, c, -c, s, -s, root, -root],
                         dtype=np.int64)
        probe.flags.writeable = False
        found = (probe, probe.tobytes() if not failed else b"")
        if len(_PROBES) < 256:  # (a program makes a handful of distinct calls)
            _PROBES[key] = found
    return found


def _call_disagreement(spread: list[tuple[int, int]]) -> str | None:
    """The error when the ranks are in different calls, sides or roots: ``spread`` holds
    the (largest, smallest) call index, side index and root over the ranks."""
    (call_hi, call_lo), (side_hi, side_lo), (root_hi, root_lo) = spread
    if call_hi != call_lo:
        return (f"the ranks call different methods at the same time ({CALLS[call_lo]} and "
                f"{CALLS[call_hi]}): every rank must make the same collective call")
    what = CALLS[call_hi]
    if side_hi != side_lo and side_lo >= 0:  # (a bad side is that rank's own error)
        return (f"{what}: the ranks pass different side= ({SIDES[side_lo]} and "
                f"{SIDES[side_hi]}); every rank must pass the same side")
    if root_hi != root_lo and root_lo >= 0:
        return (f"{what}: the ranks pass different root= ({root_lo} and {root_hi}); every "
                "rank must pass the same root")
    return None


# the side whose rows each call takes when it has no side= (the others pass theirs)
CALL_SIDES = {"matmul": "input", "matmul_t": "output"}
ROWS_OF = {"input": "X, matmul's input: op.n_local_in",
           "output": "A @ X, matmul's output and matmul_t's input: op.n_local"}


def _rows_error(arr: np.ndarray, what: str, rows: int, side: str | None = None) -> str | None:
    """What is wrong with this rank's dense rows (None: nothing). A wrong row count names
    the side, how many rows it has on this rank, and how to get them."""
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
    if arr.dtype not in FLOAT_DTYPES:
        return (f"{what}: expected float32 or float64, got {arr.dtype}; convert with "
                "x.astype(np.float32) (numpy) or x.float() (torch)")
    if arr.shape[1] < 1:
        return f"{what}: the dense matrix needs at least one column"
    if kernels.count_nonfinite(arr):
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
    return None


def device_families() -> list[str]:
    """The algorithms that run on a device grid (their ``runs_on_device`` flag)."""
    return sorted(name for name, cls in ALGORITHMS.items() if cls.runs_on_device)


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


def _describe(algorithm: str, options: dict) -> str:
    """``algorithm(option=value, ...)`` in a canonical form (arrays by shape and dtype)."""
    def value(v) -> str:
        if isinstance(v, np.ndarray) or is_torch(v):
            return f"<{type(v).__name__} {tuple(v.shape)} {v.dtype}>"
        return repr(v)

    return f"{algorithm}(" + ", ".join(f"{k}={value(v)}" for k, v in sorted(options.items())
                                       if v is not None) + ")"


def _as_kind(y: np.ndarray, as_torch: bool, device=None):
    """``y`` as numpy, or as a torch tensor on ``device`` (always on a device grid)."""
    if as_torch or device is not None:
        return to_device(y, device)
    return y


def _scatter_block_rows(comm: MPI.Comm, grid: ProcessGrid, root: int, A, rows: Partition):
    """Root sends every rank the CSR rows of its block row (replicas get the same rows). The
    others wait without spinning (``wait_quietly``) while root cuts and sends the blocks."""
    me = comm.Get_rank()
    offsets = rows.offsets
    if me == root:
        mine = None
        for dest in range(comm.Get_size()):
            b = dest // grid.replication
            piece = A[int(offsets[b]):int(offsets[b + 1])]
            if dest == root:
                mine = piece
                continue
            head = np.array([piece.shape[0], piece.shape[1], piece.nnz], dtype=np.int64)
            comm.Send([head, MPI.INT64_T], dest=dest, tag=11)
            comm.Send([piece.indptr.astype(np.int64), MPI.INT64_T], dest=dest, tag=12)
            comm.Send([piece.indices.astype(np.int64), MPI.INT64_T], dest=dest, tag=13)
            comm.Send([piece.data, MPI.DOUBLE], dest=dest, tag=14)
        return sp.csr_array(mine)
    head = np.empty(3, dtype=np.int64)
    wait_quietly(comm.Irecv([head, MPI.INT64_T], source=root, tag=11))
    n_rows, n_cols, nnz = (int(v) for v in head)
    indptr = np.empty(n_rows + 1, dtype=np.int64)
    indices = np.empty(nnz, dtype=np.int64)
    data = np.empty(nnz, dtype=np.float64)
    wait_quietly(comm.Irecv([indptr, MPI.INT64_T], source=root, tag=12),
                 comm.Irecv([indices, MPI.INT64_T], source=root, tag=13),
                 comm.Irecv([data, MPI.DOUBLE], source=root, tag=14))
    return sp.csr_array((data, indices, indptr), shape=(n_rows, n_cols))
