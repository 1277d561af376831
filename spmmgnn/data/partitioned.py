"""The one partition-and-write path: partition a graph into block rows, relabel it so each
block row is contiguous, and write it atomically in the project's HDF5 format (used by the
``datasets`` and ``partition`` commands)."""

from __future__ import annotations

import time
import warnings
from pathlib import Path

import numpy as np

from ..layout import Partition
from ..runtime.errors import SpmmgnnError
from .graph import Graph
from .h5graph import write_graph
from .splits import SPLITS, SplitPlan, SplitWarning, complete_split

# from this many non-zeros on the metrics and the writing take seconds: their progress lines
LOUD_NNZ = 5_000_000


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
                      original_perm: np.ndarray | None = None, progress=None,
                      part_vector: np.ndarray | None = None,
                      **refine_options) -> Partition:
    """Partition ``graph`` into ``parts`` block rows with ``method`` ('none' = near-equal
    contiguous blocks, else a ``spmmgnn.partitioners`` method), relabel and write ``path``.

    A labelled graph without a complete train/val/test split gets the missing parts drawn
    first (``splits``: the given parts kept, a warning saying what was drawn), so every
    reader of the file trains on the same split. ``original_perm``: the input's own
    relabelling (``source_perm``), composed into the stored perm; ``refine_options`` go to
    ``partitioners.partition`` (the ``+maxsend`` refinement), and ``progress`` (a callable
    taking a line) its step lines and the writing's. ``part_vector``: a part vector made
    outside (``parts_file.read_part_vector``: checked, values in [0, ``parts``)) used instead
    of partitioning; ``method`` then names where it came from. The method and its seconds
    are stored in the file. Returns the Partition
    (with ``metrics`` when a partitioner ran)."""
    if isinstance(parts, bool) or not isinstance(parts, (int, np.integer)) or parts < 1:
        raise SpmmgnnError(f"the number of block rows must be a positive integer, got {parts!r}")
    if parts > max(graph.n, 1):  # checked before the k + 1 offsets are allocated
        raise SpmmgnnError(f"{parts} block rows for {graph.n} vertices: each block row needs "
                           f"a vertex, so give at most {max(graph.n, 1)} (--parts)")
    graph.validate()
    if graph.labels is not None and not all(m in graph.masks for m in SPLITS):
        ids = np.arange(graph.n, dtype=np.int64) if original_perm is None else original_perm
        plan = SplitPlan(tuple(s for s in SPLITS if s in graph.masks), seed)
        graph.masks, unlabelled = complete_split(ids, graph.labels, graph.masks, seed)
        warnings.warn(plan.note(graph.name, unlabelled), SplitWarning, stacklevel=2)
    from ..partitioners import partition

    say = progress if progress is not None and graph.adj.nnz >= LOUD_NNZ else (
        lambda line: None)
    if part_vector is not None:
        from ..partitioners.metrics import metrics

        if np.shape(part_vector) != (graph.n,):
            raise SpmmgnnError(f"the part vector has shape {np.shape(part_vector)} but the "
                               f"graph has {graph.n:,} vertices")
        t = time.perf_counter()
        part = Partition.from_parts(part_vector, int(parts), method=method)
        say(f"metrics of the given part vector (k={int(parts)})")
        part.metrics = metrics(graph.adj, part.parts, int(parts))
        part.seconds = 0.0
        say(f"metrics done in {time.perf_counter() - t:.1f} s")
    else:
        part = partition(graph.adj, int(parts), method=method, epsilon=epsilon, seed=seed,
                         threads=threads, progress=progress, **refine_options)
    empty = int(np.count_nonzero(part.sizes == 0))
    if empty:
        warnings.warn(f"{graph.name}: {empty} of the {part.k} block rows are empty ("
                      f"{graph.n} vertices): ranks reading them hold no rows", stacklevel=2)
    t = time.perf_counter()
    say(f"writing {path} (relabelled into {part.k} block rows)")
    g = graph if part.is_identity else graph.permuted(part.perm)
    perm = part.perm if original_perm is None else original_perm[part.perm]
    write_graph(path, g.adj, offsets=part.offsets, perm=perm, features=g.features,
                labels=g.labels, masks=g.masks, num_classes=g.num_classes or None,
                directed=g.directed, partition=dict(method=part.method, seconds=part.seconds))
    say(f"wrote {path} in {time.perf_counter() - t:.1f} s")
    return part
