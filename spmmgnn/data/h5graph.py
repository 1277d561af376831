"""The project's HDF5 graph file: written once after partitioning, read block row by block row.

Layout (format "spmmgnn-graph", version 1)::

    attrs   format, version, n, nnz, k, num_classes (if labels), directed
    offsets (k+1,) int64     block row b owns relabelled vertices offsets[b]:offsets[b+1]
    perm    (n,)   int64     perm[new] = vertex id in the source graph
    adj/indptr  (n+1,) int64 CSR of the relabelled adjacency (row = target vertex)
    adj/indices (nnz,) int32|int64
    adj/data    (nnz,) float32|float64   optional; absent means all ones
    features (n, f) float32   optional
    labels   (n,)   int64     optional (-1 = unlabelled)
    masks/train, masks/val, masks/test  (n,) bool   optional

A rank reads only ``indptr[lo:hi+1]`` and the matching slice of indices/data/features, so no
rank loads the whole graph.
"""

from __future__ import annotations

from dataclasses import dataclass

import h5py
import numpy as np
import scipy.sparse as sp

from ..atomic import atomic_path
from ..errors import SpmmgnnError

FORMAT = "spmmgnn-graph"
VERSION = 1
MASKS = ("train", "val", "test")


@dataclass
class BlockRow:
    """One block row of a graph file: rows lo:hi of the relabelled graph."""

    lo: int
    hi: int
    n: int
    adj: sp.csr_array  # (hi - lo) x n, global relabelled columns
    features: np.ndarray | None
    labels: np.ndarray | None
    masks: dict[str, np.ndarray]
    num_classes: int
    offsets: np.ndarray
    perm: np.ndarray | None


def write_graph(path, adj, offsets=None, perm=None, features=None, labels=None, masks=None,
                num_classes: int | None = None, directed: bool = False) -> None:
    """Write an already relabelled graph atomically (a crash never leaves a half file)."""
    adj = sp.csr_array(adj)
    n = adj.shape[0]
    if adj.shape != (n, n):
        raise SpmmgnnError(f"adjacency must be square, got {adj.shape}")
    offsets = np.asarray([0, n] if offsets is None else offsets, dtype=np.int64)
    if offsets[0] != 0 or offsets[-1] != n or np.any(np.diff(offsets) < 0):
        raise SpmmgnnError("block offsets must rise from 0 to n")
    with atomic_path(path) as tmp, h5py.File(tmp, "w") as h:
        h.attrs.update(format=FORMAT, version=VERSION, n=n, nnz=int(adj.nnz),
                       k=offsets.size - 1, directed=bool(directed))
        h["offsets"] = offsets
        h["perm"] = np.arange(n, dtype=np.int64) if perm is None else np.asarray(perm, np.int64)
        g = h.create_group("adj")
        g["indptr"] = adj.indptr.astype(np.int64)
        g["indices"] = adj.indices.astype(np.int32 if n < 2**31 - 1 else np.int64)
        if not np.all(adj.data == 1):
            g["data"] = adj.data
        if features is not None:
            h.create_dataset("features", data=np.asarray(features, dtype=np.float32),
                             chunks=True)
        if labels is not None:
            labels = np.asarray(labels, dtype=np.int64)
            h["labels"] = labels
            h.attrs["num_classes"] = int(num_classes if num_classes is not None
                                         else labels.max() + 1)
        for name, m in (masks or {}).items():
            h[f"masks/{name}"] = np.asarray(m, dtype=bool)


def _open(path) -> h5py.File:
    try:
        h = h5py.File(path, "r")
    except OSError as exc:
        raise SpmmgnnError(f"cannot open graph file {path}: {exc}") from None
    if h.attrs.get("format") != FORMAT:
        h.close()
        raise SpmmgnnError(f"{path} is not a {FORMAT} HDF5 file")
    return h


def read_offsets(path) -> np.ndarray:
    with _open(path) as h:
        return h["offsets"][...]


def read_block_row(path, lo: int | None = None, hi: int | None = None,
                   block: int | None = None) -> BlockRow:
    """Read rows lo:hi (or block row ``block``) without touching the rest of the file."""
    with _open(path) as h:
        n = int(h.attrs["n"])
        offsets = h["offsets"][...]
        if block is not None:
            if not 0 <= block < offsets.size - 1:
                raise SpmmgnnError(f"{path} has {offsets.size - 1} block rows, no block {block}")
            lo, hi = int(offsets[block]), int(offsets[block + 1])
        lo = 0 if lo is None else int(lo)
        hi = n if hi is None else int(hi)
        indptr = h["adj/indptr"][lo:hi + 1].astype(np.int64)
        a, b = int(indptr[0]), int(indptr[-1])
        indices = h["adj/indices"][a:b].astype(np.int64)
        data = h["adj/data"][a:b] if "adj/data" in h else np.ones(b - a)
        if indices.size and (indices.min() < 0 or indices.max() >= n):
            raise SpmmgnnError(f"{path}: column index out of range in rows {lo}:{hi}")
        adj = sp.csr_array((data.astype(np.float64), indices, indptr - a), shape=(hi - lo, n))
        return BlockRow(
            lo=lo, hi=hi, n=n, adj=adj,
            features=h["features"][lo:hi] if "features" in h else None,
            labels=h["labels"][lo:hi] if "labels" in h else None,
            masks={m: h[f"masks/{m}"][lo:hi] for m in MASKS if f"masks/{m}" in h},
            num_classes=int(h.attrs.get("num_classes", 0)),
            offsets=offsets, perm=h["perm"][...] if "perm" in h else None,
        )
