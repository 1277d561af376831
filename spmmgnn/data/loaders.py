"""Read graphs from the supported file formats into a ``Graph``.

Formats, chosen by extension (or folder): Matrix Market ``.mtx``, METIS ``.graph``,
whitespace edge lists (``.txt``/``.el``/``.edges``/``.tsv``/``.csv``: ``src dst [weight]`` per
line, ``#``/``%`` comments), scipy ``.npz`` (``scipy.sparse.save_npz``), PyG ``.pt``
(``torch.save`` of a ``Data`` or its ``to_dict()``), OGB-style folders and the project's ``.h5``.

Direction, the same in every format: (u, v) = edge u -> v, aggregated at v. ``Graph.adj`` has
row = target, so an entry or line (u, v) with weight w becomes ``adj[v, u] = w``:

- ``.mtx`` / ``.npz``: entry (i, j) of the stored matrix is the edge i -> j (the loaders
  transpose what they read; a symmetric matrix is unchanged);
- METIS ``.graph``: line v lists the out-neighbours of v (``adj[nb, v]``);
- edge lists, OGB ``edge.csv``: ``src dst`` is src -> dst; PyG ``edge_index``: row 0 sources;
- ``.h5`` stores ``Graph.adj`` itself (row = target) and is read as-is.

Size guard (before anything of the declared size is allocated): the vertex bound of
``limits`` (``check_vertices``), and a Matrix Market header at most one entry per byte of
data; for ``.npz`` the bytes are the arrays' uncompressed size.
Every reader turns malformed input into one SpmmgnnError naming the file.
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

import numpy as np
import scipy.io
import scipy.sparse as sp

from ..runtime.errors import SpmmgnnError
from .graph import Graph
from .h5graph import read_block_row
from .limits import NpzError, check_input_file, check_vertices, data_bytes, read_npz
from .ogb import load_ogb
from .pyg import load_pt

EDGE_LIST_SUFFIXES = {".txt", ".el", ".edges", ".tsv", ".csv"}
DECODE_ERRORS = (OSError, EOFError, ValueError, zlib.error)  # incl. UnicodeDecodeError


def _fail(path, why: str):
    raise SpmmgnnError(f"cannot read graph {path}: {why}")


def _read_text(path) -> str:
    """The file as text (``.gz`` decompressed); decoding errors become SpmmgnnError."""
    p = Path(path)
    try:
        if p.suffix.lower() == ".gz":
            with gzip.open(p, "rt", encoding="utf-8") as fh:
                return fh.read()
        return p.read_text(encoding="utf-8")
    except DECODE_ERRORS as exc:
        _fail(path, f"unreadable text ({type(exc).__name__}: {exc})")


def _edges_to_target_rows(path, A) -> sp.csr_array:
    """``A`` holds (source, target) entries: the float64 CSR of its transpose (row = target)."""
    A = sp.coo_array(A)
    if A.dtype.kind not in "biuf":
        _fail(path, f"values must be real numbers, got {A.dtype}")
    if A.shape[0] != A.shape[1]:
        _fail(path, f"adjacency must be square, got {A.shape}")
    T = sp.csr_array(A.T, dtype=np.float64)
    T.sum_duplicates()
    return T


def is_symmetric(A) -> bool:
    """Same entries (pattern and values) in A and its transpose: an undirected graph."""
    A = sp.csr_array(A)
    return A.shape[0] == A.shape[1] and (A != A.T).nnz == 0


def _graph(path, A) -> Graph:
    """A Graph of an adjacency whose format does not say whether it is directed: it is
    directed exactly when it is not symmetric."""
    return Graph(adj=A, directed=not is_symmetric(A), name=Path(path).stem)


# ------------------------------------------------------------------ Matrix Market
def _check_mtx_header(path) -> None:
    try:
        rows, cols, entries, fmt, field, _ = scipy.io.mminfo(str(path))
    except Exception as exc:  # scipy raises several types for malformed headers
        _fail(path, f"malformed Matrix Market header ({type(exc).__name__}: {exc})")
    nbytes = data_bytes(path)
    if rows != cols:
        _fail(path, f"adjacency must be square, got {rows} x {cols}")
    check_vertices(path, rows, nbytes)
    if not 0 <= entries <= nbytes:
        _fail(path, f"header declares {entries} entries, more than the file's {nbytes} bytes "
              "can hold")
    if field == "complex":
        _fail(path, "complex values are not supported")


def load_mtx(path) -> Graph:
    """Matrix Market: entry (i, j) is the edge i -> j (read transposed into row = target)."""
    _check_mtx_header(path)
    try:
        A = scipy.io.mmread(str(path))
    except Exception as exc:  # scipy raises several types for malformed files
        _fail(path, f"malformed Matrix Market file ({type(exc).__name__}: {exc})")
    if isinstance(A, np.ndarray):
        A = sp.coo_array(A)
    return _graph(path, _edges_to_target_rows(path, A))


# ------------------------------------------------------------------ scipy .npz
def _read_npz(path) -> dict[str, np.ndarray]:
    try:
        return read_npz(path, "graph")
    except NpzError as exc:
        _fail(path, f"not a scipy sparse .npz file ({exc})")


def _npz_matrix(path, arrays: dict[str, np.ndarray]):
    """The sparse matrix stored by ``scipy.sparse.save_npz`` (csr, csc or coo)."""
    fmt = arrays.get("format")
    shape = arrays.get("shape")
    if fmt is None or shape is None or fmt.ndim != 0 or fmt.dtype.kind not in "SU":
        _fail(path, "not a scipy sparse .npz file (no format/shape)")
    fmt = fmt.item().decode("ascii", "replace") if fmt.dtype.kind == "S" else fmt.item()
    if shape.shape != (2,) or shape.dtype.kind not in "iu" or shape[0] != shape[1]:
        _fail(path, f"adjacency must be square, got shape {shape.tolist()}")
    n = int(shape[0])
    check_vertices(path, n, sum(a.nbytes for a in arrays.values()))
    need = {"csr": ("data", "indices", "indptr"), "csc": ("data", "indices", "indptr"),
            "coo": ("data", "row", "col")}.get(fmt)
    if need is None or any(k not in arrays for k in need):
        _fail(path, f"unsupported or incomplete sparse format {fmt!r} (csr, csc, coo)")
    if fmt == "coo":
        return sp.coo_array((arrays["data"], (arrays["row"], arrays["col"])), shape=(n, n))
    cls = sp.csr_array if fmt == "csr" else sp.csc_array
    A = cls((arrays["data"], arrays["indices"], arrays["indptr"]), shape=(n, n))
    A.check_format(full_check=True)
    return A


def load_npz(path) -> Graph:
    """scipy ``.npz``: entry (i, j) is the edge i -> j (read transposed into row = target)."""
    arrays = _read_npz(path)
    try:
        A = _npz_matrix(path, arrays)
    except (ValueError, TypeError, IndexError, OverflowError) as exc:
        _fail(path, f"inconsistent sparse arrays ({type(exc).__name__}: {exc})")
    return _graph(path, _edges_to_target_rows(path, A))


# ------------------------------------------------------------------ edge lists
def load_edge_list(path, n: int | None = None) -> Graph:
    """``src dst [weight]`` per line (edge src -> dst); vertex ids are 0-based integers."""
    try:
        data = np.loadtxt(str(path), comments=("#", "%"), ndmin=2, dtype=np.float64,
                          delimiter="," if ".csv" in Path(path).suffixes else None)
    except (*DECODE_ERRORS, IndexError) as exc:
        _fail(path, f"malformed edge list ({type(exc).__name__}: {exc})")
    if n is not None:
        check_vertices(path, n, data_bytes(path))
    if data.size == 0:
        return Graph(adj=sp.csr_array((n or 0, n or 0)), directed=True, name=Path(path).stem)
    if data.shape[1] not in (2, 3):
        _fail(path, f"expected 2 or 3 columns per line, got {data.shape[1]}")
    ends = data[:, :2]
    if not np.all(np.isfinite(data)) or np.any(ends != np.floor(ends)) or ends.min() < 0:
        _fail(path, "vertex ids must be non-negative integers and weights finite")
    top = int(ends.max())
    if n is None:
        size = check_vertices(path, top + 1, data_bytes(path))
    elif top >= n:
        _fail(path, f"vertex id {top} out of range [0, {n})")
    else:
        size = n
    src, dst = ends[:, 0].astype(np.int64), ends[:, 1].astype(np.int64)
    w = data[:, 2] if data.shape[1] == 3 else np.ones(src.size)
    A = sp.csr_array((w, (dst, src)), shape=(size, size))
    A.sum_duplicates()
    return Graph(adj=A, directed=True, name=Path(path).stem)


# ------------------------------------------------------------------ METIS
def _metis_header(path, line: str) -> tuple[int, int, int, int]:
    """``n m [fmt [ncon]]`` -> (n, m, skip, step): values before the neighbours of each line,
    and 2 when every neighbour is followed by an edge weight."""
    head = line.split()
    fmt = head[2] if len(head) > 2 else "0"
    try:
        n, m = int(head[0]), int(head[1])
        ncon = int(head[3]) if len(head) > 3 else 1
    except (ValueError, IndexError):
        _fail(path, f"bad header line {line[:80]!r}")
    if len(head) > 4 or n < 0 or m < 0 or ncon < 1 or len(fmt) > 3 or set(fmt) - {"0", "1"}:
        _fail(path, f"bad header line {line[:80]!r}")
    check_vertices(path, n, data_bytes(path))
    fmt = fmt.zfill(3)
    skip = int(fmt[0] == "1") + (ncon if fmt[1] == "1" else 0)
    return n, m, skip, 2 if fmt[2] == "1" else 1


def _metis_tokens(path, body: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """All integer tokens of the vertex lines, and the number of tokens on each line."""
    split = [ln.split() for ln in body]
    counts = np.fromiter(map(len, split), dtype=np.int64, count=len(split))
    try:
        tok = np.array([t for s in split for t in s], dtype=np.int64)
    except (ValueError, OverflowError):
        _fail(path, "non-integer token in the vertex lines")
    return tok, counts


def load_metis(path) -> Graph:
    """METIS ``.graph``: header ``n m [fmt [ncon]]``, then line v (1-based) lists the
    out-neighbours of v (edges v -> nb, so ``adj[nb, v]``), after v's size/weights and each
    followed by its edge weight when fmt says so. ``m`` counts edges (or each twice)."""
    lines = [ln for ln in _read_text(path).splitlines() if not ln.lstrip().startswith("%")]
    if not lines:
        _fail(path, "empty file")
    n, m, skip, step = _metis_header(path, lines[0])
    body = lines[1:]
    while body and not body[-1].strip():
        body.pop()
    if len(body) > n:
        _fail(path, f"{len(body)} vertex lines for {n} vertices")
    tok, counts = _metis_tokens(path, body)
    rest = counts - skip
    bad = np.flatnonzero((rest < 0) | (rest % step != 0))
    if bad.size:
        _fail(path, f"vertex {bad[0] + 1}: wrong number of values on its line")
    line = np.repeat(np.arange(counts.size), counts)
    pos = np.arange(tok.size) - np.repeat(np.cumsum(counts) - counts, counts) - skip
    is_nb = (pos >= 0) & (pos % step == 0)
    nb, src = tok[is_nb] - 1, line[is_nb]
    if nb.size and (nb.min() < 0 or nb.max() >= n):
        _fail(path, f"vertex {src[np.argmax((nb < 0) | (nb >= n))] + 1}: neighbour out of "
              f"range 1..{n}")
    w = tok[(pos >= 0) & ~is_nb].astype(np.float64) if step == 2 else np.ones(nb.size)
    if nb.size not in (m, 2 * m):
        _fail(path, f"header says {m} edges but the lists hold {nb.size} entries")
    A = sp.csr_array((w, (nb, src)), shape=(n, n))
    A.sum_duplicates()
    return _graph(path, A)


# ------------------------------------------------------------------ others
def load_h5(path) -> Graph:
    """The project's HDF5 file: ``adj`` is stored with row = target and read as-is."""
    b = read_block_row(path)
    return Graph(adj=b.adj, features=b.features, labels=b.labels, masks=b.masks,
                 num_classes=b.num_classes, directed=b.directed, name=Path(path).stem)


# the table of readers: a file's last suffix (before .gz), or "<dir>" for an OGB-style folder
LOADERS = {".mtx": load_mtx, ".npz": load_npz, ".graph": load_metis, ".h5": load_h5,
           ".hdf5": load_h5, ".pt": load_pt, "<dir>": load_ogb,
           **{s: load_edge_list for s in EDGE_LIST_SUFFIXES}}


def load_graph(path) -> Graph:
    """Load any supported graph file or OGB-style folder."""
    p = Path(path)
    if not p.exists():
        raise SpmmgnnError(f"graph file {path} does not exist")
    if p.is_dir():
        return LOADERS["<dir>"](p).validate()
    check_input_file(path, "graph file")
    suffixes = [s.lower() for s in p.suffixes]
    key = suffixes[-1] if suffixes else ""
    if key == ".gz" and len(suffixes) > 1:
        key = suffixes[-2]
    if key not in LOADERS:
        _fail(path, f"unknown format {key or '(no extension)'}; supported: "
              f"{', '.join(sorted(k for k in LOADERS if k != '<dir>'))}")
    return LOADERS[key](p).validate()

