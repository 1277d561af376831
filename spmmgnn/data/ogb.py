"""OGB-style raw node-property-prediction folders (as in ``ogbn-*`` downloads).

Layout (``.csv`` or ``.csv.gz``; the ``raw/`` level is optional)::

    DIR/raw/edge.csv            "src,dst" per line (0-based), edge from src to dst
    DIR/raw/num-node-list.csv   optional: number of vertices
    DIR/raw/node-feat.csv       optional: one row of comma-separated floats per vertex
    DIR/raw/node-label.csv      optional: one label per vertex (NaN / empty = unlabelled)
    DIR/split/<scheme>/{train,valid,test}.csv   vertex ids of each split (or DIR/split/*.csv)

Direction as in every format (``loaders``): (u, v) = edge u -> v, aggregated at v. Row =
target in ``Graph.adj``, so edge (src, dst) is entry ``A[dst, src]``. The graph is
loaded as given (``directed=True``); symmetrize it for undirected datasets
(``spmmgnn train --symmetrize``, ``spmmgnn datasets convert --symmetrize``). The vertex count
is bounded by the folder's data size as in ``limits.check_vertices``; any malformed file is
one SpmmgnnError naming it.
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from ..runtime.errors import SpmmgnnError
from .graph import Graph
from .limits import check_vertices, data_bytes

READ_ERRORS = (ValueError, OSError, EOFError, OverflowError, zlib.error)
MAX_LABEL = 2**31 - 2
SPLIT_FILES = {"train": "train", "val": "valid", "test": "test"}


def _find(folder: Path, stem: str) -> Path | None:
    for suffix in (".csv", ".csv.gz"):
        p = folder / f"{stem}{suffix}"
        if p.is_file():
            return p
    return None


def _read(path: Path, dtype, what: str) -> np.ndarray:
    try:
        return np.loadtxt(path, delimiter=",", dtype=dtype, ndmin=2)
    except READ_ERRORS as exc:
        raise SpmmgnnError(f"cannot read {what} {path}: {exc}") from None


def _read_labels(path: Path) -> np.ndarray:
    """One label per line; empty or ``nan`` lines are unlabelled (-1)."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt") as fh:
            lines = fh.read().split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        col = np.array([ln.split(",")[0].strip() for ln in lines], dtype=object)
        col[col == ""] = "nan"
        lab = col.astype(np.float64)
    except READ_ERRORS as exc:
        raise SpmmgnnError(f"cannot read labels {path}: {exc}") from None
    known = lab[np.isfinite(lab)]
    if np.any(known != np.floor(known)) or np.any((known < -1) | (known > MAX_LABEL)):
        raise SpmmgnnError(f"cannot read labels {path}: labels must be integers in "
                           f"[0, {MAX_LABEL}] (or empty / nan / -1 when unlabelled)")
    return np.where(np.isfinite(lab), lab, -1).astype(np.int64)


def _has_split_file(folder: Path) -> bool:
    return any(_find(folder, stem) for stem in SPLIT_FILES.values())


def _split_folder(root: Path) -> Path | None:
    """``DIR/split`` if it holds any of train/valid/test, else its first scheme folder that
    does (a folder with only some of them still counts: the training data path keeps the
    given parts and draws only the missing ones, see ``data.splits``)."""
    split = root / "split"
    if not split.is_dir():
        return None
    if _has_split_file(split):
        return split
    schemes = sorted(p for p in split.iterdir() if p.is_dir() and _has_split_file(p))
    return schemes[0] if schemes else None


def _vertex_count(raw: Path, edges: np.ndarray, features, labels, files: list[Path]) -> int:
    """num-node-list's count, else the largest id / row count; checked against the data size."""
    count_file = _find(raw, "num-node-list")
    if count_file:
        counts = _read(count_file, np.int64, "vertex count").ravel()
        if counts.size != 1:
            raise SpmmgnnError(f"cannot read vertex count {count_file}: expected one number, "
                               f"got {counts.size}")
        n = int(counts[0])
        files = [*files, count_file]
    else:
        n = max(int(edges.max()) + 1 if edges.size else 0,
                0 if features is None else features.shape[0],
                0 if labels is None else labels.shape[0])
    return check_vertices(raw, n, sum(data_bytes(f) for f in files))


def _masks(root: Path, n: int) -> dict[str, np.ndarray]:
    masks = {}
    split = _split_folder(root)
    if split is None:
        return masks
    for key, stem in SPLIT_FILES.items():
        f = _find(split, stem)
        if f is None:
            continue
        ids = _read(f, np.int64, f"{key} split").ravel()
        if ids.size and (ids.min() < 0 or ids.max() >= n):
            raise SpmmgnnError(f"{f}: vertex id out of range [0, {n})")
        m = np.zeros(n, dtype=bool)
        m[ids] = True
        masks[key] = m
    return masks


def load_ogb(path) -> Graph:
    """Read an OGB-style folder into a Graph (features float32, labels int64, masks)."""
    root = Path(path)
    raw = root / "raw" if (root / "raw").is_dir() else root
    edge_file = _find(raw, "edge")
    if edge_file is None:
        raise SpmmgnnError(f"cannot read graph {path}: no edge.csv[.gz] in {raw} (expected an "
                           "OGB-style folder)")
    edges = _read(edge_file, np.int64, "edge list")
    if edges.size and edges.shape[1] != 2:
        raise SpmmgnnError(f"{edge_file}: expected 2 columns (src,dst), got {edges.shape[1]}")
    edges = edges.reshape(-1, 2)
    feat_file = _find(raw, "node-feat")
    features = _read(feat_file, np.float32, "features") if feat_file else None
    label_file = _find(raw, "node-label")
    labels = _read_labels(label_file) if label_file else None
    files = [f for f in (edge_file, feat_file, label_file) if f is not None]
    n = _vertex_count(raw, edges, features, labels, files)
    if edges.size and (edges.min() < 0 or edges.max() >= n):
        raise SpmmgnnError(f"{edge_file}: vertex id out of range [0, {n})")
    for name, arr in (("features", features), ("labels", labels)):
        if arr is not None and arr.shape[0] != n:
            raise SpmmgnnError(f"{path}: {name} have {arr.shape[0]} rows for {n} vertices")
    A = sp.csr_array((np.ones(edges.shape[0]), (edges[:, 1], edges[:, 0])), shape=(n, n))
    A.sum_duplicates()
    A.data[:] = 1.0
    num_classes = int(labels.max()) + 1 if labels is not None and labels.size else 0
    return Graph(adj=A, features=features, labels=labels, masks=_masks(root, n),
                 num_classes=num_classes, directed=True, name=root.name)
