"""Put a graph on the process grid: normalized adjacency as a DistSpMM, plus local rows.

Two paths:

- ``distribute_graph``: root holds a whole ``Graph`` in memory (synthetic, or a small file).
  Root normalizes it offline, optionally partitions it, and ``DistSpMM.from_scipy`` ships each
  rank its block row; features, labels and masks are scattered the same way.
- ``load_h5_distributed``: the project's HDF5 file. Each rank reads only its own block row
  (the file's block offsets when they match P/c, else near-equal contiguous ranges of the
  stored order), normalizes it distributed (``data.normalize``) and joins
  ``DistSpMM.from_block_row``. No rank loads the whole graph.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from mpi4py import MPI

from ..algorithms.base import DistSpMM
from ..data.graph import Graph
from ..data.normalize import normalize, normalize_block_row
from ..data.pyg import graph_from_pyg
from ..data.splits import SPLITS, SplitPlan, SplitWarning, complete_split
from ..grid import ProcessGrid
from ..layout import Partition
from ..runtime.errors import SpmmgnnError, agree, check_on_root
from ..runtime.wire import bcast_json
from .fingerprint import block_structure_sum, fingerprint, reduce_sum, structure_sum
from .validate import check_training_rows, nonfinite_rows


@dataclass
class LocalData:
    """What one rank trains on: its rows of everything, and global sizes."""

    op: DistSpMM                      # the normalized adjacency on the grid
    vertex_ids: np.ndarray            # source-graph id of each local row (keys dropout)
    features: torch.Tensor            # n_local x f
    labels: torch.Tensor              # n_local int64 (-1 = unlabelled)
    masks: dict[str, torch.Tensor]    # n_local bool, per split
    num_classes: int
    counts: dict[str, int]            # global number of vertices per split
    n: int
    nnz: int
    name: str
    info: dict = field(default_factory=dict)
    fingerprint: dict = field(default_factory=dict)  # see training.fingerprint

    @property
    def num_features(self) -> int:
        return int(self.features.shape[1])


def _local_data(op: DistSpMM, grid: ProcessGrid, name: str, vertex_ids: np.ndarray,
                features: np.ndarray, labels: np.ndarray, given: dict[str, np.ndarray],
                plan: SplitPlan, num_classes: int | None, n: int, nnz: int, info: dict,
                structure: int, bad_weights: np.ndarray | None = None,
                bad_normalized: np.ndarray | None = None) -> LocalData:
    """Complete the split, validate this rank's rows (collective) and wrap them up.
    ``structure``: the global structure sum of the fingerprint; ``bad_weights`` /
    ``bad_normalized``: this rank's rows with NaN or Inf values before and after
    normalization (``validate.nonfinite_rows``), when the rank normalized them."""
    vertex_ids = np.ascontiguousarray(vertex_ids, dtype=np.int64)
    labels = np.asarray(labels, dtype=np.int64)
    masks, unlabelled = complete_split(vertex_ids, labels, given, plan.seed)
    rows_comm = grid.across_block_rows
    classes, counts = check_training_rows(rows_comm, name, vertex_ids, features, labels, masks,
                                          num_classes, bad_weights, bad_normalized)
    note = plan.note(name, int(rows_comm.allreduce(unlabelled, op=MPI.SUM)))
    if note and grid.comm.Get_rank() == 0:
        warnings.warn(note, SplitWarning, stacklevel=3)
    info = dict(info, split=dict(given=list(plan.given), drawn=list(plan.drawn), note=note))
    return LocalData(
        op=op, vertex_ids=vertex_ids, features=torch.from_numpy(features),
        labels=torch.from_numpy(labels),
        masks={s: torch.from_numpy(np.ascontiguousarray(m)) for s, m in masks.items()},
        num_classes=classes, counts=counts, n=n, nnz=nnz, name=name, info=info,
        fingerprint=fingerprint(rows_comm, vertex_ids, features, labels, masks, structure))


def _check_learnable(g: Graph) -> Graph:
    """Root-side checks of what only the whole graph shows (shapes, the adjacency's values,
    features and labels present); the rows' values are checked on every rank later."""
    g.validate(feature_values=False)
    if g.features is None:
        raise SpmmgnnError(f"{g.name}: the graph has no node features; training needs them "
                           "(use an HDF5 file written by `spmmgnn datasets`, an OGB folder, "
                           "or the synthetic csbm dataset)")
    if g.labels is None:
        raise SpmmgnnError(f"{g.name}: the graph has no node labels; node classification "
                           "needs them")
    return g


def make_partition(A, k: int, method: str, seed: int = 0, parts_per_node: int | None = None,
                   row_weight: int = 0):
    """A Partition of A's rows into k blocks (``none``: near-equal contiguous blocks;
    ``parts_per_node``: the block rows of one node, for the ``twolevel:`` methods;
    ``row_weight``: ``partitioners.partition``'s); a partition that takes more than a few
    seconds reports its steps on stderr."""
    from ..partitioners import partition
    from ..partitioners.api import check_row_weight_use, stderr_progress

    check_row_weight_use(row_weight, method, "--partitioner")
    return partition(A, k, method=method, seed=seed, progress=stderr_progress,
                     parts_per_node=parts_per_node, row_weight=row_weight)


def two_level_problem(grid: ProcessGrid, partitioner: str) -> str | None:
    """Why a ``twolevel:`` partitioner cannot lay out ``grid``'s block rows (None: it can,
    or another partitioner), in the flags of ``train`` / ``bench``: one node's block rows,
    its ranks over c, must divide the P / c block rows."""
    from ..partitioners.twolevel import is_two_level

    per_node, k = grid.block_rows_per_node, grid.n_block_rows
    if not is_two_level(partitioner) or k % per_node == 0:
        return None
    ranks = (f"--ranks-per-node {grid.ranks_per_node}" if grid.ranks_per_node is not None
             else f"the {per_node * grid.replication} ranks sharing a node")
    return (f"--partitioner {partitioner} keeps the block rows of one node together: "
            f"{ranks} / --replication {grid.replication} = {per_node} block rows per node, "
            f"which must divide the {k} block rows of P = {grid.comm.Get_size()} ranks / "
            f"--replication {grid.replication}")


def distribute_graph(graph: Graph | None, grid: ProcessGrid, normalization: str,
                     algorithm: str = "sparse1d", partitioner: str = "none", seed: int = 0,
                     dtype: torch.dtype = torch.float32, root: int = 0,
                     symmetrize: bool = False, partition=None, row_weight: int = 0,
                     **op_options) -> LocalData:
    """Collective. ``graph`` is used on ``root`` only (others pass None): a ``Graph``, or a
    PyTorch Geometric ``Data`` (or dict of its tensors; see ``data.pyg``).

    ``partition`` (root only): a part vector, block sizes or ``Partition`` used instead of
    ``partitioner``; ``row_weight``: what each row weighs beside its non-zeros in the
    partitioner's balance (``partitioners.partition``).
    """
    comm = grid.comm
    np_dtype = torch.empty(0, dtype=dtype).numpy().dtype
    if partition is None and comm.Get_rank() == root:
        two_level = two_level_problem(grid, partitioner)
    else:
        two_level = None
    agree(comm, two_level)

    def prepare():
        g = _check_learnable(graph if isinstance(graph, Graph) else graph_from_pyg(graph))
        A = g.adj
        if symmetrize:
            A = ((A + A.T) > 0).astype(np.float64)
        A_hat = normalize(A, normalization)
        if A_hat.nnz and not np.all(np.isfinite(A_hat.data)):
            raise SpmmgnnError(f"{g.name}: the {normalization!r} normalization gives NaN or "
                               "Inf values; negative edge weights can make a degree 0 or "
                               "negative")
        part = (partition if partition is not None
                else make_partition(A_hat, grid.n_block_rows, partitioner, seed,
                                    grid.block_rows_per_node, row_weight))
        given = [s for s in SPLITS if s in g.masks]
        packed = np.column_stack([g.labels.astype(np.float64)]
                                 + [g.masks[s].astype(np.float64) for s in given])
        meta = dict(num_classes=int(g.num_classes) or None, n=g.n, nnz=int(A_hat.nnz),
                    name=g.name, given=given, structure=structure_sum(A_hat, np.arange(g.n)),
                    partition_seconds=float(getattr(part, "seconds", 0.0)))
        return A_hat, part, np.asarray(g.features, dtype=np_dtype), packed, meta

    got = check_on_root(comm, root, prepare)
    A_hat, part, X, packed, meta = got if got is not None else (None,) * 5
    meta = bcast_json(comm, meta, root)
    op = DistSpMM.from_scipy(A_hat, grid, algorithm=algorithm, partition=part, root=root,
                             validate=False, **op_options)
    x_local = _scatter(op, X, root)
    extra = _scatter(op, packed, root)
    given = {s: extra[:, 1 + i] > 0.5 for i, s in enumerate(meta["given"])}
    return _local_data(
        op, grid, meta["name"], op.row_ids(), x_local, extra[:, 0].astype(np.int64), given,
        SplitPlan(tuple(meta["given"]), seed), meta["num_classes"], meta["n"], meta["nnz"],
        dict(path="memory", partition=op.partition.method, sizes=op.partition.sizes.tolist(),
             partition_seconds=meta["partition_seconds"]),
        meta["structure"])


def _scatter(op: DistSpMM, a: np.ndarray | None, root: int) -> np.ndarray:
    """``op.scatter_rows`` of root's array ``a`` as numpy: through the grid's backend (a
    device grid takes and returns tensors on its device), then a host copy for the checks
    and the fingerprint; the trainer places its copies where the backend keeps them."""
    be = op.grid.backend
    on_root = op.grid.comm.Get_rank() == root
    return be.to_host(op.scatter_rows(be.from_host(a) if on_root else None, root=root))


class StoredPartitionWarning(UserWarning):
    """An HDF5 file's stored block rows do not match the run's number of block rows."""


def load_h5_distributed(path, grid: ProcessGrid, normalization: str,
                        algorithm: str = "sparse1d", seed: int = 0,
                        dtype: torch.dtype = torch.float32, **op_options) -> LocalData:
    """Collective. Every rank reads only its own block row of the HDF5 graph file."""
    from ..data.h5graph import check_perm_distributed, read_block_row, read_offsets

    comm = grid.comm
    offsets, error = None, None
    try:
        offsets = read_offsets(path)
    except (SpmmgnnError, OSError, KeyError) as exc:
        error = str(exc)
    agree(comm, error)
    n = int(offsets[-1])
    k = grid.n_block_rows
    file_blocks = offsets.size - 1
    partition = (Partition.from_sizes(np.diff(offsets), n) if file_blocks == k
                 else Partition.contiguous(n, k))
    if file_blocks not in (1, k) and comm.Get_rank() == 0:
        warnings.warn(f"{path} is laid out for {file_blocks} block rows and this run has {k}: "
                      f"its stored partition is not used; each rank reads a contiguous range "
                      f"of the file's vertex order (same results, other bytes). Write it with "
                      f"--parts {k} to keep a partition", StoredPartitionWarning, stacklevel=2)
    b = grid.block_row
    lo, hi = int(partition.offsets[b]), int(partition.offsets[b + 1])
    block, error = None, None
    try:
        block = read_block_row(path, lo=lo, hi=hi, whole_perm=False)
        if block.features is None or block.labels is None:
            raise SpmmgnnError(f"{path}: the file has no features or no labels; training "
                               "needs both")
    except (SpmmgnnError, OSError, KeyError, ValueError) as exc:
        error = str(exc)
    agree(comm, error)
    check_perm_distributed(grid.across_block_rows, path, block.ids, n)
    rows_comm = grid.across_block_rows
    adj, block.adj = block.adj, None   # freed once normalized: A_hat is all that is kept
    bad_weights = nonfinite_rows(adj)
    A_hat = normalize_block_row(adj, normalization, partition.offsets, rows_comm,
                                ids=block.ids)
    del adj
    vertex_ids = block.ids
    nnz = int(rows_comm.allreduce(int(A_hat.nnz), op=MPI.SUM))
    # the source ids of the columns come from their owners (no rank reads all of perm),
    # once per distinct ghost column
    structure = reduce_sum(rows_comm, block_structure_sum(rows_comm, partition.offsets, b,
                                                          A_hat, vertex_ids))
    bad_normalized = nonfinite_rows(A_hat)
    op = DistSpMM.from_block_row(A_hat, grid, partition, algorithm=algorithm, validate=False,
                                 **op_options)
    del A_hat   # the operator holds its own split of it
    np_dtype = torch.empty(0, dtype=dtype).numpy().dtype
    given = {s: block.masks[s] for s in SPLITS if s in block.masks}
    return _local_data(
        op, grid, Path(path).stem, vertex_ids,
        np.ascontiguousarray(block.features, dtype=np_dtype), block.labels, given,
        SplitPlan(tuple(given), seed), block.num_classes or None, n, nnz,
        dict(path=str(path), file_blocks=file_blocks,
             partition=(f"file:{block.partition_method or 'unrecorded'}" if file_blocks == k
                        else "contiguous"),
             sizes=partition.sizes.tolist()),
        structure, bad_weights=bad_weights, bad_normalized=bad_normalized)
