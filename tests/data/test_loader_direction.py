"""Every graph format means the same direction: (u, v) = edge u -> v, aggregated at v.

One small directed graph (a self loop, an isolated vertex, both 0 -> 3 and 3 -> 0 with different
weights) is written in every format and must load to the same hand-written ``Graph.adj``
(row = target, column = source).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

from spmmgnn.data.h5graph import write_graph
from spmmgnn.data.loaders import load_graph

# (source, target, weight); vertex 2 is isolated, 4 -> 4 is a self loop
EDGES = [(0, 1, 2), (1, 3, 3), (3, 0, 4), (0, 3, 5), (4, 4, 6), (1, 4, 7)]
N = 5
# adj[target, source] = weight, written out by hand
EXPECTED = np.array([
    [0, 0, 0, 4, 0],   # 3 -> 0
    [2, 0, 0, 0, 0],   # 0 -> 1
    [0, 0, 0, 0, 0],   # isolated
    [5, 3, 0, 0, 0],   # 0 -> 3, 1 -> 3
    [0, 7, 0, 0, 6],   # 1 -> 4, 4 -> 4
], dtype=np.float64)


def _stored_matrix() -> sp.coo_matrix:
    """The matrix a user stores: entry (u, v) = weight of the edge u -> v."""
    u, v, w = (np.array(c) for c in zip(*EDGES, strict=True))
    return sp.coo_matrix((w.astype(np.float64), (u, v)), shape=(N, N))


def write_mtx(tmp: Path) -> Path:
    path = tmp / "g.mtx"
    scipy.io.mmwrite(str(path), _stored_matrix())
    return path


def write_npz_csr(tmp: Path) -> Path:
    path = tmp / "g.npz"
    sp.save_npz(path, _stored_matrix().tocsr())
    return path


def write_npz_coo(tmp: Path) -> Path:
    path = tmp / "coo.npz"
    sp.save_npz(path, _stored_matrix())
    return path


def write_metis(tmp: Path) -> Path:
    """fmt 001: line v lists v's out-neighbours (1-based), each followed by its edge weight."""
    path = tmp / "g.graph"
    path.write_text("% 5 vertices, 6 directed edges, edge weights\n"
                    "5 6 001\n"
                    "2 2 4 5\n"     # vertex 1 (0): 0 -> 1 (2), 0 -> 3 (5)
                    "4 3 5 7\n"     # vertex 2 (1): 1 -> 3 (3), 1 -> 4 (7)
                    "\n"            # vertex 3 (2): isolated
                    "1 4\n"         # vertex 4 (3): 3 -> 0 (4)
                    "5 6\n")        # vertex 5 (4): 4 -> 4 (6)
    return path


def write_txt(tmp: Path) -> Path:
    path = tmp / "g.txt"
    path.write_text("# src dst weight\n" + "".join(f"{u} {v} {w}\n" for u, v, w in EDGES))
    return path


def write_csv(tmp: Path) -> Path:
    path = tmp / "g.csv"
    path.write_text("".join(f"{u},{v},{w}\n" for u, v, w in EDGES))
    return path


def write_pt(tmp: Path) -> Path:
    import torch

    path = tmp / "g.pt"
    ei = torch.tensor([[u for u, _, _ in EDGES], [v for _, v, _ in EDGES]])
    torch.save(dict(edge_index=ei, edge_weight=torch.tensor([float(w) for *_, w in EDGES]),
                    num_nodes=N), path)
    return path


def write_h5(tmp: Path) -> Path:
    """The project's format stores Graph.adj itself (row = target)."""
    path = tmp / "g.h5"
    write_graph(path, sp.csr_array(EXPECTED))
    return path


WRITERS = [write_mtx, write_npz_csr, write_npz_coo, write_metis, write_txt, write_csv,
           write_pt, write_h5]


@pytest.mark.parametrize("write", WRITERS, ids=lambda f: f.__name__.removeprefix("write_"))
def test_every_format_reads_u_v_as_edge_u_to_v(write, tmp_path):
    g = load_graph(write(tmp_path))
    assert g.adj.shape == (N, N)
    np.testing.assert_array_equal(g.adj.toarray(), EXPECTED)


def test_ogb_folder_reads_src_dst_as_edge_src_to_dst(tmp_path):
    raw = tmp_path / "ogbn-dir" / "raw"
    raw.mkdir(parents=True)
    (raw / "edge.csv").write_text("".join(f"{u},{v}\n" for u, v, _ in EDGES))
    (raw / "num-node-list.csv").write_text(f"{N}\n")
    g = load_graph(tmp_path / "ogbn-dir")  # unweighted: the pattern only
    np.testing.assert_array_equal(g.adj.toarray(), (EXPECTED != 0).astype(np.float64))


def test_symmetric_matrix_market_is_unchanged(tmp_path):
    S = sp.coo_matrix(np.array([[0, 1, 2], [1, 0, 0], [2, 0, 3]], dtype=np.float64))
    path = tmp_path / "s.mtx"
    scipy.io.mmwrite(str(path), S, symmetry="symmetric")
    np.testing.assert_array_equal(load_graph(path).adj.toarray(), S.toarray())
