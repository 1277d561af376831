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

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from mpi4py import MPI

from ..algorithms.base import DistSpMM
from ..data.csbm import random_split
from ..data.graph import Graph
from ..data.normalize import normalize, normalize_block_row
from ..data.pyg import graph_from_pyg
from ..errors import SpmmgnnError, agree, check_on_root
from ..grid import ProcessGrid
from ..layout import Partition

SPLITS = ("train", "val", "test")


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

    @property
    def num_features(self) -> int:
        return int(self.features.shape[1])


def _global_counts(grid: ProcessGrid, masks: dict[str, np.ndarray]) -> dict[str, int]:
    local = np.array([int(masks[s].sum()) for s in SPLITS], dtype=np.int64)
    total = np.empty_like(local)
    grid.across_block_rows.Allreduce(local, total, op=MPI.SUM)
    return dict(zip(SPLITS, (int(t) for t in total), strict=True))


def _check_learnable(g: Graph, seed: int) -> Graph:
    """Root-side checks: features and labels present; a seeded 60/20/20 split if none."""
    g.validate()
    if g.features is None:
        raise SpmmgnnError(f"{g.name}: the graph has no node features; training needs them "
                           "(use an HDF5 file written by `spmmgnn datasets`, an OGB folder, "
                           "or the synthetic csbm dataset)")
    if g.labels is None:
        raise SpmmgnnError(f"{g.name}: the graph has no node labels; node classification "
                           "needs them")
    labelled = g.labels >= 0
    if not labelled.any():
        raise SpmmgnnError(f"{g.name}: no vertex has a label")
    if not all(s in g.masks for s in SPLITS):
        g.masks = random_split(g.n, seed, labelled=labelled)
    g.masks = {s: g.masks[s] & labelled for s in SPLITS}
    if not g.masks["train"].any():
        raise SpmmgnnError(f"{g.name}: the training mask is empty")
    if not g.num_classes:
        g.num_classes = int(g.labels.max()) + 1
    if g.labels.max() >= g.num_classes:
        raise SpmmgnnError(f"{g.name}: label {int(g.labels.max())} >= num_classes "
                           f"{g.num_classes}")
    return g


def make_partition(A, k: int, method: str, seed: int = 0):
    """A Partition of A's rows into k blocks, or None for near-equal contiguous blocks."""
    if method in ("none", "contiguous") or k == 1:
        return None
    try:
        from ..partitioners import partition as partition_fn
    except ImportError:
        partition_fn = None
    if partition_fn is None:
        raise SpmmgnnError(f"partitioner {method!r} is not available in this build; use "
                           "--partitioner none")
    return partition_fn(A, k, method=method, seed=seed)


def distribute_graph(graph: Graph | None, grid: ProcessGrid, normalization: str,
                     algorithm: str = "sparse1d", partitioner: str = "none", seed: int = 0,
                     dtype: torch.dtype = torch.float32, root: int = 0,
                     symmetrize: bool = False, partition=None, **op_options) -> LocalData:
    """Collective. ``graph`` is used on ``root`` only (others pass None): a ``Graph``, or a
    PyTorch Geometric ``Data`` (or dict of its tensors; see ``data.pyg``).

    ``partition`` (root only): a part vector, block sizes or ``Partition`` used instead of
    ``partitioner``.
    """
    comm = grid.comm
    np_dtype = torch.empty(0, dtype=dtype).numpy().dtype

    def prepare():
        g = _check_learnable(graph if isinstance(graph, Graph) else graph_from_pyg(graph),
                             seed)
        A = g.adj
        if symmetrize:
            A = ((A + A.T) > 0).astype(np.float64)
        A_hat = normalize(A, normalization)
        part = (partition if partition is not None
                else make_partition(A_hat, grid.n_block_rows, partitioner, seed))
        packed = np.column_stack([g.labels.astype(np.float64)]
                                 + [g.masks[s].astype(np.float64) for s in SPLITS])
        meta = dict(num_classes=int(g.num_classes), n=g.n, nnz=int(A_hat.nnz), name=g.name,
                    f=int(g.features.shape[1]))
        return A_hat, part, np.asarray(g.features, dtype=np_dtype), packed, meta

    got = check_on_root(comm, root, prepare)
    A_hat, part, X, packed, meta = got if got is not None else (None,) * 5
    meta = comm.bcast(meta, root=root)
    op = DistSpMM.from_scipy(A_hat, grid, algorithm=algorithm, partition=part, root=root,
                             validate=False, **op_options)
    x_local = op.scatter_rows(X, root=root)
    extra = op.scatter_rows(packed, root=root)
    labels = extra[:, 0].astype(np.int64)
    masks = {s: extra[:, 1 + i] > 0.5 for i, s in enumerate(SPLITS)}
    vertex_ids = op.partition.perm[op.lo:op.hi]
    return LocalData(
        op=op, vertex_ids=np.ascontiguousarray(vertex_ids, dtype=np.int64),
        features=torch.from_numpy(x_local),
        labels=torch.from_numpy(labels), masks={s: torch.from_numpy(m) for s, m in masks.items()},
        num_classes=meta["num_classes"], counts=_global_counts(grid, masks), n=meta["n"],
        nnz=meta["nnz"], name=meta["name"],
        info=dict(path="memory", partition=op.partition.method, sizes=op.partition.sizes.tolist()))


def load_h5_distributed(path, grid: ProcessGrid, normalization: str,
                        algorithm: str = "sparse1d", seed: int = 0,
                        dtype: torch.dtype = torch.float32, **op_options) -> LocalData:
    """Collective. Every rank reads only its own block row of the HDF5 graph file."""
    from ..data.h5graph import read_block_row, read_offsets

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
    b = grid.block_row
    lo, hi = int(partition.offsets[b]), int(partition.offsets[b + 1])
    block, error = None, None
    try:
        block = read_block_row(path, lo=lo, hi=hi)
        if block.features is None or block.labels is None:
            raise SpmmgnnError(f"{path}: the file has no features or no labels; training "
                               "needs both")
    except (SpmmgnnError, OSError, KeyError, ValueError) as exc:
        error = str(exc)
    agree(comm, error)
    A_hat = normalize_block_row(block.adj, normalization, partition.offsets, grid.across_block_rows)
    op = DistSpMM.from_block_row(A_hat, grid, partition, algorithm=algorithm, validate=False,
                                 **op_options)
    vertex_ids = (block.perm[lo:hi] if block.perm is not None
                  else np.arange(lo, hi, dtype=np.int64))
    labels = block.labels.astype(np.int64)
    labelled = labels >= 0
    if all(s in block.masks for s in SPLITS):
        masks = {s: block.masks[s].astype(bool) & labelled for s in SPLITS}
    else:  # the same seeded split on every rank, by position in the file
        full = random_split(n, seed)
        masks = {s: full[s][lo:hi] & labelled for s in SPLITS}
    num_classes = block.num_classes or int(comm.allreduce(int(labels.max(initial=-1)),
                                                          op=MPI.MAX)) + 1
    nnz = int(grid.across_block_rows.allreduce(int(A_hat.nnz), op=MPI.SUM))
    np_dtype = torch.empty(0, dtype=dtype).numpy().dtype
    features = np.ascontiguousarray(block.features, dtype=np_dtype)
    counts = _global_counts(grid, masks)
    agree(comm, None if counts["train"] > 0 else f"{path}: the training mask is empty")
    return LocalData(
        op=op, vertex_ids=np.ascontiguousarray(vertex_ids, dtype=np.int64),
        features=torch.from_numpy(features),
        labels=torch.from_numpy(labels), masks={s: torch.from_numpy(m) for s, m in masks.items()},
        num_classes=num_classes, counts=counts, n=n, nnz=nnz, name=Path(path).stem,
        info=dict(path=str(path), file_blocks=file_blocks,
                  partition="file" if file_blocks == k else "contiguous",
                  sizes=partition.sizes.tolist()))
