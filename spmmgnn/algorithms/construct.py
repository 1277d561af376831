"""Building an operator, collectively: from the whole matrix on one rank (``from_scipy``,
``from_edge_index``) or from each rank's block row (``from_block_row``), after every rank
agreed on the algorithm, its options and the grid it needs; the matrix is checked,
normalized and relabelled on root and its block rows sent to their ranks. A mixin of
``DistSpMM``.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from ..grid import ProcessGrid, format_shape, near_square, parse_grid
from ..layout import Partition, bcast_partition, resolve_partition
from ..reorder import block_rcm, with_order
from ..runtime.agreement import agree_on, environment
from ..runtime.errors import (
    SpmmgnnError,
    agree,
    check_on_root,
    collective_error,
    wait_for_root,
    wait_quietly,
)
from ..runtime.wire import bcast_json
from .registry import ALGORITHMS, grid_hint

GENERIC = "base"  # the name of DistSpMM itself: its factories take algorithm=


class Construction:
    """The factories and the checks before construction (a mixin of ``DistSpMM``)."""

    @classmethod
    def from_scipy(cls, A, grid: ProcessGrid | None = None, algorithm: str | None = None,
                   partition=None, col_partition=None, root: int = 0,
                   reorder: str | None = None, normalize: str | None = None,
                   **options):
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
        algo_cls = cls._algorithm_class(algorithm, comm, dict(
            options, reorder=reorder, normalize=normalize, root=root))
        agree(comm, _normalize_error(normalize) or _root_error(root, comm.Get_size()))
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
                       **options):
        """Collective. Each rank passes its own block row (CSR, relabelled global columns).

        This is the path for data read block by block from disk: no rank holds all of A.
        """
        algo_cls = cls._algorithm_class(algorithm, grid.comm, dict(
            options, partition=_layout(partition), col_partition=_layout(col_partition)))
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
                        normalize: str | None = None, root: int = 0, **options):
        """Collective. A graph in PyTorch Geometric's convention: ``edge_index[0]`` are
        sources, ``edge_index[1]`` targets, and aggregation happens at the target, so the
        operator is ``A[target, source] = weight`` (duplicates summed, like PyG's scatter-add).

        ``normalize="gcn"`` applies ``D^-1/2 (A + I) D^-1/2`` with remaining self loops (PyG's
        ``gcn_norm``), ``"mean"`` the row-stochastic mean. Only root's values are used;
        numpy arrays and torch tensors are accepted.
        """
        from ..data.pyg import edge_index_adjacency

        grid = grid or ProcessGrid()
        cls._algorithm_class(algorithm, grid.comm, dict(options, normalize=normalize, root=root))
        agree(grid.comm, _normalize_error(normalize) or _root_error(root, grid.comm.Get_size()))
        A = check_on_root(grid.comm, root,
                          lambda: edge_index_adjacency(edge_index, num_nodes, edge_weight))
        return cls.from_scipy(A, grid, algorithm=algorithm, root=root, normalize=normalize,
                              **options)

    @classmethod
    def grid_for(cls, comm: MPI.Comm, replication: int = 1,
                 shape: str | tuple[int, ...] | None = None,
                 ranks_per_node: int | None = None, device: str | None = None,
                 transport: str = "auto") -> ProcessGrid:
        """Collective: the grid this algorithm runs on, from the command line's flags:
        ``shape`` (``"2x3"`` or a tuple) for the 2D/3D algorithms (None: the factors of P
        closest to a square or cube), ``replication`` for the others; ``ranks_per_node``
        groups the ranks into nodes (None: by shared memory); ``device`` and ``transport`` as
        ``ProcessGrid``'s.
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
                               device=device, transport=transport)
        agree(comm, None if replication == 1 else
              f"{cls.name} runs on a {wants}D grid: drop --replication (--grid sets its shape)")
        return ProcessGrid(comm, shape=shape or near_square(comm.Get_size(), wants),
                           ranks_per_node=ranks_per_node, device=device,
                           transport=transport)

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
                         options: dict | None = None) -> type:
        """The class of ``algorithm``, after every rank agreed on the construction arguments
        (``agreement.agree_on``: the name, the options given, and the environment settings
        that change the collectives), before any algorithm-specific communication, which
        would hang or fail obscurely if the ranks built different operators."""
        if algorithm is None:
            algorithm = "sparse1d" if cls.name == GENERIC else cls.name
        given = {k: v for k, v in sorted((options or {}).items()) if v is not None}
        agree_on(comm, {"algorithm": algorithm, **given, **environment()}, "the operator")
        error = None
        if algorithm not in ALGORITHMS:
            error = f"unknown algorithm {algorithm!r}; choose one of {sorted(ALGORITHMS)}"
        elif cls.name != GENERIC and ALGORITHMS[algorithm] is not cls:
            error = f"{cls.__name__}.from_*: algorithm={algorithm!r} names another class"
        agree(comm, error)
        return ALGORITHMS[algorithm]



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


def _layout(partition) -> object:
    """A layout as the construction agreement compares it: a ``Partition`` by its block
    offsets (every rank must hold the same), anything else as given."""
    if isinstance(partition, Partition):
        return partition.offsets.tolist()
    return partition


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

