"""The one partition-and-write path: partition a graph into block rows, relabel it so each
block row is contiguous, and write it atomically in the project's HDF5 format (used by the
``datasets`` and ``partition`` commands)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import SpmmgnnError
from ..layout import Partition
from .csbm import random_split
from .graph import Graph
from .h5graph import write_graph

CONTIGUOUS = ("none", "contiguous")


def source_perm(path, n: int) -> np.ndarray | None:
    """The stored perm of an already relabelled ``.h5`` input (maps its rows to the original
    ids), so a re-partitioned file still maps to the original vertex ids."""
    if Path(path).suffix.lower() not in (".h5", ".hdf5"):
        return None
    from .h5graph import read_block_row

    perm = read_block_row(path, 0, 0).perm
    return None if perm is None or perm.shape != (n,) else perm


def write_partitioned(graph: Graph, path, parts: int, method: str = "none", seed: int = 0,
                      epsilon: float = 0.03, threads: int | None = None,
                      original_perm: np.ndarray | None = None, **refine_options) -> Partition:
    """Partition ``graph`` into ``parts`` block rows with ``method`` ('none' = near-equal
    contiguous blocks, else a ``spmmgnn.partitioners`` method), relabel and write ``path``.

    A labelled graph without a complete train/val/test split gets a seeded one first, so
    every reader of the file trains on the same split. ``original_perm``: the input's own
    relabelling (``source_perm``), composed into the stored perm; ``refine_options`` go to
    ``partitioners.partition`` (the ``+maxsend`` refinement). Returns the Partition
    (with ``metrics`` when a partitioner ran)."""
    if isinstance(parts, bool) or not isinstance(parts, (int, np.integer)) or parts < 1:
        raise SpmmgnnError(f"the number of block rows must be a positive integer, got {parts!r}")
    graph.validate()
    if graph.labels is not None and not all(m in graph.masks for m in ("train", "val", "test")):
        graph.masks = random_split(graph.n, seed, labelled=graph.labels >= 0)
    if method in CONTIGUOUS:
        part = Partition.contiguous(graph.n, int(parts))
    else:
        from ..partitioners import partition

        part = partition(graph.adj, int(parts), method=method, epsilon=epsilon, seed=seed,
                         threads=threads, **refine_options)
    g = graph if part.is_identity else graph.permuted(part.perm)
    perm = part.perm if original_perm is None else original_perm[part.perm]
    write_graph(path, g.adj, offsets=part.offsets, perm=perm, features=g.features,
                labels=g.labels, masks=g.masks, num_classes=g.num_classes or None,
                directed=g.directed)
    return part
