"""PyTorch Geometric data without requiring PyG: a ``Data`` object (or anything with its
attributes, or its ``to_dict()``) in-process, or saved with ``torch.save`` to a ``.pt`` file.

Direction is PyG's (and every format's: (u, v) = edge u -> v, aggregated at v):
``edge_index[0]`` are sources, ``edge_index[1]`` targets, aggregation at
the target, so the adjacency is ``A[target, source] = edge_weight`` (1 when absent; duplicate
edges are summed). Features ``x``, labels ``y`` (or -1 / missing) and the boolean
``train_mask`` / ``val_mask`` / ``test_mask`` are taken when present.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import scipy.sparse as sp

from ..backend.convert import to_numpy
from ..runtime.errors import SpmmgnnError
from ..runtime.machine import check_memory
from .graph import Graph
from .limits import MAX_VERTICES, data_bytes, vertex_limit

SPLITS = ("train", "val", "test")
# The exact globals a ``torch.save``d PyG ``Data`` (PyG 2.x) needs: its class, its storage and
# attribute classes. Names, not prefixes: a module prefix would also admit the module's functions
# (``torch_geometric.data.extract_zip`` unpacks an archive anywhere when called by the unpickler).
PYG_DATA_CLASSES = frozenset({
    "torch_geometric.data.data.Data",
    "torch_geometric.data.data.DataEdgeAttr",
    "torch_geometric.data.data.DataTensorAttr",
    "torch_geometric.data.feature_store.TensorAttr",
    "torch_geometric.data.graph_store.EdgeAttr",
    "torch_geometric.data.storage.BaseStorage",
    "torch_geometric.data.storage.GlobalStorage",
    "torch_geometric.data.storage.NodeStorage",
    "torch_geometric.data.storage.EdgeStorage",
})


def _get(data, key: str):
    if isinstance(data, dict):
        return data.get(key)
    return getattr(data, key, None)


def _array(value, what: str, kinds: str) -> np.ndarray:
    """``value`` as a numpy array whose dtype kind is one of ``kinds``, else SpmmgnnError."""
    try:
        arr = to_numpy(value, what)
    except (TypeError, ValueError, RuntimeError) as exc:  # e.g. bfloat16 or sparse tensors
        raise SpmmgnnError(f"{what}: not convertible to a numpy array ({exc})") from None
    if arr.dtype.kind not in kinds:
        raise SpmmgnnError(f"{what}: expected a numeric array, got {arr.dtype}")
    return arr


def edge_index_adjacency(edge_index, num_nodes: int, edge_weight=None,
                         what: str = "edge_index") -> sp.csr_array:
    """``A[target, source] = weight`` (n x n CSR, duplicates summed) from PyG's edge_index."""
    ei = _array(edge_index, what, "biufcUSOV")
    if ei.ndim != 2 or ei.shape[0] != 2 or ei.dtype.kind not in "iu":
        raise SpmmgnnError(f"{what}: edge_index must be an integer array of shape (2, E), "
                           f"got {ei.dtype} {tuple(ei.shape)}")
    try:
        n = int(num_nodes)
        ok = not isinstance(num_nodes, bool) and n == num_nodes and n >= 0
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        raise SpmmgnnError(f"{what}: num_nodes must be an integer >= 0, got {num_nodes!r}")
    # the CSR's row pointers and the COO -> CSR conversion (and a normalized copy)
    check_memory(3 * 8.0 * (n + 1) + 64.0 * ei.shape[1],
                 f"{what}: the {n}-vertex adjacency (num_nodes={n})")
    if ei.size and (ei.min() < 0 or ei.max() >= n):
        raise SpmmgnnError(f"{what}: edge_index holds vertex ids outside [0, {n})")
    w = (np.ones(ei.shape[1]) if edge_weight is None
         else _array(edge_weight, f"{what}: edge_weight", "biuf").astype(np.float64).reshape(-1))
    if w.shape[0] != ei.shape[1]:
        raise SpmmgnnError(f"{what}: edge_weight has {w.shape[0]} values for "
                           f"{ei.shape[1]} edges")
    A = sp.csr_array((w, (ei[1].astype(np.int64), ei[0].astype(np.int64))), shape=(n, n))
    A.sum_duplicates()
    return A


def _num_nodes(data, name: str, max_nodes: int) -> int:
    """``num_nodes``, else the rows of ``x``, else the largest id + 1; at most ``max_nodes``."""
    n = _get(data, "num_nodes")
    x = _get(data, "x")
    if n is None and x is not None:
        shape = getattr(x, "shape", ())
        n = shape[0] if len(shape) else None
        ei = _array(_get(data, "edge_index"), f"{name}: edge_index", "biufcUSOV")
        top = int(ei.max()) if n is not None and ei.size and ei.dtype.kind in "iu" else -1
        if top >= n:
            raise SpmmgnnError(f"{name}: x has {n} rows but edge_index names vertex {top}: x "
                               "needs one row per vertex (or give num_nodes)")
    if n is None:
        ei = _array(_get(data, "edge_index"), f"{name}: edge_index", "biufcUSOV")
        n = int(ei.max()) + 1 if ei.size and ei.dtype.kind in "iu" else 0
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 0 <= n <= max_nodes:
        raise SpmmgnnError(f"{name}: num_nodes must be an integer in [0, {max_nodes}], "
                           f"got {n!r}")
    return int(n)


def _labels(y, name: str) -> np.ndarray:
    """``y`` as int64 labels (-1 = unlabelled); integral values only."""
    y = _array(y, f"{name}: y", "biuf")
    if y.ndim > 1 and y.size != y.shape[0]:
        raise SpmmgnnError(f"{name}: y has shape {y.shape}: give one class id per vertex "
                           "(one-hot or multi-column labels: y.argmax(1))")
    y = y.reshape(-1)
    if y.dtype.kind == "f" and not np.all(np.isfinite(y) & (y == np.floor(y))):
        raise SpmmgnnError(f"{name}: y must hold integer class labels")
    if y.size and (y.min() < -1 or y.max() >= MAX_VERTICES):
        raise SpmmgnnError(f"{name}: labels must lie in [-1, {MAX_VERTICES})")
    return y.astype(np.int64)


def graph_from_pyg(data, name: str = "pyg", max_nodes: int | None = None) -> Graph:
    """A ``Graph`` from a PyG ``Data`` (or a dict of its tensors). ``max_nodes`` bounds the
    vertex count (default ``limits.MAX_VERTICES``)."""

    edge_index = _get(data, "edge_index")
    if edge_index is None:
        raise SpmmgnnError(f"{name}: the PyG data has no edge_index")
    n = _num_nodes(data, name, MAX_VERTICES if max_nodes is None else max_nodes)
    A = edge_index_adjacency(edge_index, n, _get(data, "edge_weight"), name)
    x, y = _get(data, "x"), _get(data, "y")
    labels = None if y is None else _labels(y, name)
    masks = {}
    for s in SPLITS:
        m = _get(data, f"{s}_mask")
        if m is not None:
            masks[s] = _array(m, f"{name}: {s}_mask", "biu").reshape(-1).astype(bool)
    features = None if x is None else _array(x, f"{name}: x", "biuf").astype(np.float32)
    g = Graph(adj=A, features=features, labels=labels, masks=masks, directed=True, name=name,
              num_classes=int(labels.max(initial=-1)) + 1 if labels is not None else 0)
    return g.validate()


def load_pt(path) -> Graph:
    """A ``.pt`` file from ``torch.save(data)`` or ``torch.save(data.to_dict())``.

    Read with ``torch.load(weights_only=True)``: besides tensors, only the classes named in
    ``PYG_DATA_CLASSES`` (PyG's ``Data``, needs PyG installed) are allowed; any other global
    is refused before anything is unpickled."""
    import importlib

    import torch

    try:
        wanted = torch.serialization.get_unsafe_globals_in_checkpoint(str(path))
    except Exception as exc:  # not a zip checkpoint, truncated, ...
        raise SpmmgnnError(f"cannot read graph {path}: not a torch .pt file "
                           f"({type(exc).__name__}: {exc})") from None
    foreign = [g for g in wanted if g not in PYG_DATA_CLASSES]
    if foreign:
        raise SpmmgnnError(f"cannot read graph {path}: refusing to unpickle {foreign[0]}"
                           f"{f' (and {len(foreign) - 1} more)' if len(foreign) > 1 else ''}: "
                           "only tensors and PyG's Data classes are allowed (weights_only=True)")
    allowed = []
    for name in wanted:  # PyG's own data containers only
        module, _, attr = name.rpartition(".")
        try:
            allowed.append(getattr(importlib.import_module(module), attr))
        except (ImportError, AttributeError):
            raise SpmmgnnError(f"cannot read graph {path}: it holds a PyG {attr}; install "
                               "torch_geometric or save data.to_dict() instead") from None
    try:
        with torch.serialization.safe_globals(allowed):
            data = torch.load(str(path), weights_only=True, map_location="cpu")
    except Exception as exc:  # torch raises several types for foreign or corrupt files
        raise SpmmgnnError(f"cannot read graph {path}: not a PyG/torch .pt file readable "
                           f"with weights_only=True ({type(exc).__name__}: {exc})") from None
    if hasattr(data, "to_dict"):
        data = data.to_dict()
    if not isinstance(data, dict):
        raise SpmmgnnError(f"cannot read graph {path}: expected a PyG Data or a dict of "
                           f"tensors, got {type(data).__name__}")
    try:
        return graph_from_pyg(data, name=Path(path).stem,
                              max_nodes=vertex_limit(data_bytes(path)))
    except SpmmgnnError as exc:
        raise SpmmgnnError(f"cannot read graph {path}: {exc}") from None
