"""Read graphs from the supported file formats into a ``Graph``.

Formats, chosen by extension (or folder): Matrix Market ``.mtx``, METIS ``.graph``,
whitespace edge lists (``.txt``/``.el``/``.edges``/``.tsv``: ``src dst [weight]`` per
line, ``#``/``%`` comments), scipy ``.npz`` (``scipy.sparse.save_npz``), PyG ``.pt``
(``torch.save`` of a ``Data`` or its ``to_dict()``) and the project's ``.h5``.
Every reader turns malformed input into one SpmmgnnError naming the file.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import scipy.io
import scipy.sparse as sp

from ..errors import SpmmgnnError
from .graph import Graph

EDGE_LIST_SUFFIXES = {".txt", ".el", ".edges", ".tsv", ".csv"}


def _fail(path, why: str):
    raise SpmmgnnError(f"cannot read graph {path}: {why}")


def load_mtx(path) -> Graph:
    try:
        A = scipy.io.mmread(str(path))
    except Exception as exc:  # scipy raises several types for malformed files
        _fail(path, f"malformed Matrix Market file ({exc})")
    A = sp.csr_array(A, dtype=np.float64)
    if A.shape[0] != A.shape[1]:
        _fail(path, f"adjacency must be square, got {A.shape}")
    return Graph(adj=A, name=Path(path).stem)


def load_npz(path) -> Graph:
    try:
        A = sp.load_npz(str(path))
    except Exception as exc:
        _fail(path, f"not a scipy sparse .npz file ({exc})")
    return Graph(adj=sp.csr_array(A, dtype=np.float64), name=Path(path).stem)


def load_edge_list(path, n: int | None = None) -> Graph:
    """``src dst [weight]`` per line; vertex ids are 0-based integers."""
    try:
        data = np.loadtxt(str(path), comments=("#", "%"), ndmin=2,
                          delimiter="," if Path(path).suffix == ".csv" else None)
    except Exception as exc:
        _fail(path, f"malformed edge list ({exc})")
    if data.size == 0:
        return Graph(adj=sp.csr_array((n or 0, n or 0)), name=Path(path).stem)
    if data.shape[1] not in (2, 3):
        _fail(path, f"expected 2 or 3 columns per line, got {data.shape[1]}")
    ends = data[:, :2]
    if not np.all(np.isfinite(data)) or np.any(ends != np.floor(ends)) or ends.min() < 0:
        _fail(path, "vertex ids must be non-negative integers and weights finite")
    src, dst = ends[:, 0].astype(np.int64), ends[:, 1].astype(np.int64)
    w = data[:, 2] if data.shape[1] == 3 else np.ones(src.size)
    size = int(max(src.max(), dst.max()) + 1) if n is None else n
    A = sp.csr_array((w, (dst, src)), shape=(size, size))
    A.sum_duplicates()
    return Graph(adj=A, directed=True, name=Path(path).stem)


def load_metis(path) -> Graph:
    """METIS ``.graph``: header ``n m [fmt [ncon]]``, then one line of 1-based neighbours per
    vertex (with vertex sizes/weights and edge weights when fmt says so)."""
    try:
        lines = [ln for ln in Path(path).read_text().splitlines()
                 if not ln.lstrip().startswith("%")]
    except (OSError, UnicodeDecodeError) as exc:
        _fail(path, str(exc))
    if not lines:
        _fail(path, "empty file")
    head = lines[0].split()
    try:
        n, m = int(head[0]), int(head[1])
        fmt = head[2] if len(head) > 2 else "0"
        ncon = int(head[3]) if len(head) > 3 else 1
    except (ValueError, IndexError):
        _fail(path, f"bad header line {lines[0]!r}")
    fmt = fmt.zfill(3)
    has_vsize, has_vwgt, has_ewgt = fmt[0] == "1", fmt[1] == "1", fmt[2] == "1"
    body = lines[1:n + 1]
    if len(body) < n:
        body += [""] * (n - len(body))
    rows, cols, vals = [], [], []
    skip = int(has_vsize) + (ncon if has_vwgt else 0)
    step = 2 if has_ewgt else 1
    for v, ln in enumerate(body):  # one line per vertex: a per-row loop, not per non-zero
        try:
            tok = np.array(ln.split(), dtype=np.int64)[skip:]
        except ValueError:
            _fail(path, f"non-integer token on line {v + 2}")
        nb = tok[::step] - 1
        if nb.size and (nb.min() < 0 or nb.max() >= n):
            _fail(path, f"neighbour out of range on line {v + 2}")
        rows.append(np.full(nb.size, v, dtype=np.int64))
        cols.append(nb)
        vals.append(tok[1::step].astype(np.float64) if has_ewgt else np.ones(nb.size))
    r = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    A = sp.csr_array((np.concatenate(vals) if vals else np.zeros(0),
                      (r, np.concatenate(cols) if cols else r)), shape=(n, n))
    if A.nnz != 2 * m and A.nnz != m:
        _fail(path, f"header says {m} edges but the lists hold {A.nnz} entries")
    return Graph(adj=A, name=Path(path).stem)


def load_h5(path) -> Graph:
    from .h5graph import read_block_row

    b = read_block_row(path)
    return Graph(adj=b.adj, features=b.features, labels=b.labels, masks=b.masks,
                 num_classes=b.num_classes, name=Path(path).stem)


def load_pt(path) -> Graph:
    from .pyg import load_pt as load

    return load(path)


LOADERS = {".mtx": load_mtx, ".npz": load_npz, ".graph": load_metis, ".h5": load_h5,
           ".hdf5": load_h5, ".pt": load_pt, **{s: load_edge_list for s in EDGE_LIST_SUFFIXES}}


def load_graph(path) -> Graph:
    """Load any supported graph file (or OGB-style folder, when that loader is registered)."""
    p = Path(path)
    if not p.exists():
        raise SpmmgnnError(f"graph file {path} does not exist")
    if p.is_dir():
        loader = LOADERS.get("<dir>")
        if loader is None:
            _fail(path, "folders (OGB layout) are not supported by this build")
        return loader(p).validate()
    suffixes = [s.lower() for s in p.suffixes]
    key = suffixes[-1] if suffixes else ""
    if key == ".gz" and len(suffixes) > 1:
        key = suffixes[-2]
    if key not in LOADERS:
        _fail(path, f"unknown format {key or '(no extension)'}; supported: "
              f"{', '.join(sorted(LOADERS))}")
    return LOADERS[key](p).validate()


def _register_ogb() -> None:
    from .ogb import load_ogb

    LOADERS["<dir>"] = load_ogb


_register_ogb()
