"""Property tests of the graph loaders: random valid files load to the right graph; truncated or
byte-mutated files load to a valid Graph or raise SpmmgnnError (never another exception, a
crash or a hang); headers claiming 10**12 vertices are refused at once, without allocating."""

from __future__ import annotations

import shutil
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import h5py
import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spmmgnn import SpmmgnnError
from spmmgnn.data.graph import Graph
from spmmgnn.data.h5graph import read_block_row, write_graph
from spmmgnn.data.loaders import load_graph

SETTINGS = settings(max_examples=30, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])
SLOW_SECONDS = 10.0  # one load of a tiny file must never take this long


@st.composite
def graphs(draw) -> tuple[int, np.ndarray]:
    """(n, edges): rows (u, v, w) of the edges u -> v with integer weights."""
    n = draw(st.integers(1, 8))
    k = draw(st.integers(0, 14))
    ends = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1),
                                   st.integers(1, 9)), min_size=k, max_size=k))
    return n, np.array(ends, dtype=np.int64).reshape(-1, 3)


def dense(n: int, edges: np.ndarray) -> np.ndarray:
    """adj[v, u] = sum of the weights of u -> v (row = target)."""
    E = np.zeros((n, n))
    np.add.at(E, (edges[:, 1], edges[:, 0]), edges[:, 2])
    return E


def stored(n: int, edges: np.ndarray) -> sp.coo_matrix:
    """The matrix a user stores: entry (u, v) = edge u -> v."""
    return sp.coo_matrix((edges[:, 2].astype(np.float64), (edges[:, 0], edges[:, 1])),
                         shape=(n, n))


# ------------------------------------------------------------------ writers: path, expected
def write_mtx(d: Path, n: int, e: np.ndarray) -> tuple[Path, np.ndarray]:
    scipy.io.mmwrite(str(d / "g.mtx"), stored(n, e))
    return d / "g.mtx", dense(n, e)


def write_npz(d: Path, n: int, e: np.ndarray) -> tuple[Path, np.ndarray]:
    sp.save_npz(d / "g.npz", stored(n, e).tocsr())
    return d / "g.npz", dense(n, e)


def write_metis(d: Path, n: int, e: np.ndarray) -> tuple[Path, np.ndarray]:
    """fmt 001: line v lists v's out-neighbours (1-based), each followed by its weight."""
    lines = [" ".join(f"{v + 1} {w}" for _, v, w in e[e[:, 0] == u]) for u in range(n)]
    (d / "g.graph").write_text(f"{n} {len(e)} 001\n" + "\n".join(lines) + "\n")
    return d / "g.graph", dense(n, e)


def write_edge_list(d: Path, n: int, e: np.ndarray) -> tuple[Path, np.ndarray]:
    (d / "g.txt").write_text("# src dst w\n" + "".join(f"{u} {v} {w}\n" for u, v, w in e))
    k = int(e[:, :2].max()) + 1 if e.size else 0  # isolated top vertices are not in the file
    return d / "g.txt", dense(n, e)[:k, :k]


def write_h5(d: Path, n: int, e: np.ndarray) -> tuple[Path, np.ndarray]:
    """The project's format holds Graph.adj itself."""
    write_graph(d / "g.h5", sp.csr_array(dense(n, e)), offsets=[0, n // 2, n])
    return d / "g.h5", dense(n, e)


def write_pt(d: Path, n: int, e: np.ndarray) -> tuple[Path, np.ndarray]:
    import torch

    torch.save(dict(edge_index=torch.from_numpy(e[:, :2].T.copy()),
                    edge_weight=torch.from_numpy(e[:, 2].astype(np.float32)), num_nodes=n),
               d / "g.pt")
    return d / "g.pt", dense(n, e)


def write_ogb(d: Path, n: int, e: np.ndarray) -> tuple[Path, np.ndarray]:
    raw = d / "ogbn-fuzz" / "raw"
    raw.mkdir(parents=True)
    (raw / "edge.csv").write_text("".join(f"{u},{v}\n" for u, v, _ in e))
    (raw / "num-node-list.csv").write_text(f"{n}\n")
    return d / "ogbn-fuzz", (dense(n, e) != 0).astype(np.float64)  # unweighted


WRITERS: dict[str, Callable] = dict(mtx=write_mtx, npz=write_npz, metis=write_metis,
                                    edge_list=write_edge_list, h5=write_h5, pt=write_pt,
                                    ogb=write_ogb)


def target_file(path: Path) -> Path:
    """The file to corrupt (the edge file of an OGB folder)."""
    return path / "raw" / "edge.csv" if path.is_dir() else path


def load_timed(path: Path) -> Graph | None:
    """load_graph(path), or None on SpmmgnnError; anything else fails the test."""
    t0 = time.perf_counter()
    try:
        g = load_graph(path)
    except SpmmgnnError as exc:
        assert "\n" not in str(exc).strip()
        g = None
    assert time.perf_counter() - t0 < SLOW_SECONDS
    return g


def assert_valid(g: Graph) -> None:
    n = g.n
    assert isinstance(g.adj, sp.csr_array) and g.adj.shape == (n, n)
    assert np.all(np.isfinite(g.adj.data))
    if g.adj.nnz:
        assert g.adj.indices.min() >= 0 and g.adj.indices.max() < n


@contextmanager
def fresh() -> Iterator[Path]:
    """An empty folder per hypothesis example (pytest's tmp_path is shared by the examples)."""
    d = Path(tempfile.mkdtemp(prefix="spmmgnn-fuzz-"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


# ------------------------------------------------------------------ properties
@pytest.mark.parametrize("fmt", WRITERS)
@SETTINGS
@given(graph=graphs())
def test_valid_files_load_to_the_right_graph(fmt, graph):
    n, edges = graph
    with fresh() as d:
        path, expected = WRITERS[fmt](d, n, edges)
        g = load_graph(path)
    np.testing.assert_array_equal(g.adj.toarray(), expected)


@st.composite
def corruptions(draw) -> Callable[[bytes], bytes]:
    """Truncate, overwrite bytes, or insert bytes at drawn positions."""
    kind = draw(st.sampled_from(["truncate", "overwrite", "insert"]))
    where = draw(st.lists(st.floats(0, 1, exclude_max=True), min_size=1, max_size=4))
    junk = draw(st.lists(st.integers(0, 255), min_size=len(where), max_size=len(where)))

    def apply(data: bytes) -> bytes:
        buf = bytearray(data)
        if kind == "truncate":
            return bytes(buf[:int(where[0] * len(buf))])
        for f, b in zip(where, junk, strict=True):
            i = int(f * len(buf))
            if kind == "overwrite" and buf:
                buf[i] = b
            else:
                buf.insert(i, b)
        return bytes(buf)

    return apply


@pytest.mark.parametrize("fmt", WRITERS)
@SETTINGS
@given(graph=graphs(), corrupt=corruptions())
def test_corrupt_files_load_or_raise_spmmgnn_error(fmt, graph, corrupt):
    n, edges = graph
    with fresh() as d:
        path, _ = WRITERS[fmt](d, n, edges)
        f = target_file(path)
        f.write_bytes(corrupt(f.read_bytes()))
        g = load_timed(path)
    if g is not None:
        assert_valid(g)


@pytest.mark.parametrize("fmt", ["mtx", "metis", "edge_list"])
@SETTINGS
@given(text=st.text(alphabet="0123456789 -.e%\n,#", max_size=60))
def test_random_text_loads_or_raises_spmmgnn_error(fmt, text):
    suffix = {"mtx": ".mtx", "metis": ".graph", "edge_list": ".txt"}[fmt]
    header = "%%MatrixMarket matrix coordinate real general\n" if fmt == "mtx" else ""
    with fresh() as d:
        path = d / f"r{suffix}"
        path.write_text(header + text)
        g = load_timed(path)
    if g is not None:
        assert_valid(g)


# ------------------------------------------------------------------ huge headers
HUGE = 10**12


def refused_quickly(path: Path) -> None:
    """load_graph raises SpmmgnnError in well under a second and allocates < 64 MB."""
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        with pytest.raises(SpmmgnnError) as info:
            load_graph(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.perf_counter() - t0 < 2.0
    assert peak < 64 * 2**20
    assert str(path) in str(info.value)


def test_huge_mtx_header(tmp_path):
    path = tmp_path / "huge.mtx"
    path.write_text(f"%%MatrixMarket matrix coordinate real general\n{HUGE} {HUGE} 1\n1 1 1\n")
    refused_quickly(path)
    path.write_text(f"%%MatrixMarket matrix coordinate real general\n3 3 {HUGE}\n1 1 1\n")
    refused_quickly(path)
    path.write_text(f"%%MatrixMarket matrix array real general\n{10**6} {10**6}\n1\n")
    refused_quickly(path)


def test_huge_metis_header(tmp_path):
    path = tmp_path / "huge.graph"
    path.write_text(f"{HUGE} 1\n")
    refused_quickly(path)


def test_huge_edge_list_id(tmp_path):
    path = tmp_path / "huge.txt"
    path.write_text(f"0 {HUGE}\n")
    refused_quickly(path)


@pytest.mark.parametrize("fmt", ["coo", "csr"])
def test_huge_npz_shape(fmt, tmp_path):
    path = tmp_path / "huge.npz"
    one = np.array([0], dtype=np.int32)
    arrays = (dict(row=one, col=one) if fmt == "coo"
              else dict(indices=one, indptr=np.array([0, 1], dtype=np.int32)))
    np.savez_compressed(path, format=np.array(fmt.encode()), shape=np.array([HUGE, HUGE]),
                        data=np.ones(1), **arrays)
    refused_quickly(path)


def test_huge_h5_vertex_count(tmp_path):
    path = tmp_path / "huge.h5"
    write_graph(path, sp.csr_array(np.eye(3)))
    with h5py.File(path, "r+") as h:
        h.attrs["n"] = HUGE
    refused_quickly(path)
    with pytest.raises(SpmmgnnError):
        read_block_row(path, block=0)


def test_huge_pt_and_ogb_counts(tmp_path):
    import torch

    path = tmp_path / "huge.pt"
    torch.save(dict(edge_index=torch.zeros(2, 1, dtype=torch.int64), num_nodes=HUGE), path)
    refused_quickly(path)
    torch.save(dict(edge_index=torch.tensor([[0], [HUGE]])), path)
    refused_quickly(path)
    raw = tmp_path / "ogbn-huge" / "raw"
    raw.mkdir(parents=True)
    (raw / "edge.csv").write_text("0,1\n")
    (raw / "num-node-list.csv").write_text(f"{HUGE}\n")
    with pytest.raises(SpmmgnnError, match="out of range"):
        load_graph(tmp_path / "ogbn-huge")
