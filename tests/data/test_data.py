"""Datasets: CSBM generator, normalizations (offline and distributed), OGB folders, WordNet,
and HDF5 files written by ``spmmgnn datasets``."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from spmmgnn import SpmmgnnError
from spmmgnn.data.csbm import csbm
from spmmgnn.data.normalize import gcn_norm, mean_norm
from spmmgnn.data.splits import random_split
from spmmgnn.data.wordnet import find_wordnet, parse_wordnet, randomized_svd, tfidf

from ..mpi import run_mpi_json


# ------------------------------------------------------------------ CSBM
def test_csbm_is_a_learnable_undirected_graph():
    g = csbm(n=3000, avg_degree=10, num_features=16, num_classes=5, homophily=0.7, seed=1)
    g.validate()
    A = g.adj
    assert (A != A.T).nnz == 0 and A.diagonal().sum() == 0 and set(np.unique(A.data)) == {1}
    assert 8 < A.nnz / g.n <= 10
    rows, cols = A.nonzero()
    same = (g.labels[rows] == g.labels[cols]).mean()
    assert 0.7 < same < 0.8  # homophily + chance (1/5) of a random edge inside the class
    assert g.features.dtype == np.float32 and g.features.shape == (3000, 16)
    assert set(np.unique(g.labels)) == set(range(5)) and g.num_classes == 5
    m = g.masks
    assert not (m["train"] & m["val"]).any() and not (m["train"] & m["test"]).any()
    assert (m["train"] | m["val"] | m["test"]).all()
    assert abs(m["train"].mean() - 0.6) < 0.01
    # class means are visible in the features
    means = np.stack([g.features[g.labels == c].mean(0) for c in range(5)])
    assert np.linalg.norm(means, axis=1).min() > 0.5


def test_csbm_is_seeded():
    a, b, c = csbm(n=500, seed=3), csbm(n=500, seed=3), csbm(n=500, seed=4)
    assert (a.adj != b.adj).nnz == 0 and np.array_equal(a.features, b.features)
    assert (a.adj != c.adj).nnz > 0


def test_csbm_rejects_bad_input():
    with pytest.raises(SpmmgnnError):
        csbm(n=100, homophily=1.5)
    with pytest.raises(SpmmgnnError):
        random_split(10, 0, fractions=(0.9, 0.2, 0.1))


# ------------------------------------------------------------------ normalization
def test_gcn_norm_matches_the_formula():
    A = sp.random(30, 30, density=0.2, random_state=0, format="lil")
    A[3, 3] = 2.0  # kept ("remaining self loops")
    A = sp.csr_array(A)
    B = A.toarray()
    d = np.where(np.diag(B) == 0, 1.0, 0.0)
    B = B + np.diag(d)
    deg = B.sum(1)
    expected = B / np.sqrt(deg)[:, None] / np.sqrt(deg)[None, :]
    np.testing.assert_allclose(gcn_norm(A).toarray(), expected, rtol=1e-13)
    sym = sp.csr_array(A + A.T)
    N = gcn_norm(sym)
    assert abs(N - N.T).max() < 1e-15


def test_mean_norm_rows():
    A = sp.csr_array(np.array([[0, 1, 1], [0, 0, 0], [2, 0, 0]], dtype=float))
    M = mean_norm(A).toarray()
    np.testing.assert_allclose(M.sum(1), [1, 0, 1])
    np.testing.assert_allclose(M[0], [0, 0.5, 0.5])


@pytest.mark.parametrize("P", [3])
def test_distributed_normalization_equals_offline(P, tmp_path):
    r = run_mpi_json(P, "train_normalize.py", tmp_path)
    assert 0 in r["sizes"]
    assert r["gcn"] < 1e-14 and r["mean"] < 1e-14


# ------------------------------------------------------------------ OGB folders
def _write_csv(path: Path, rows, gz: bool):
    text = "\n".join(",".join(str(v) for v in np.atleast_1d(r)) for r in rows) + "\n"
    if gz:
        with gzip.open(str(path) + ".gz", "wt") as fh:
            fh.write(text)
    else:
        path.write_text(text)


def make_ogb(root: Path, gz: bool = True) -> Path:
    raw = root / "raw"
    raw.mkdir(parents=True)
    edges = [(0, 1), (1, 2), (2, 0), (3, 4), (4, 3), (0, 1)]
    _write_csv(raw / "edge.csv", edges, gz)
    _write_csv(raw / "num-node-list.csv", [5], gz)
    _write_csv(raw / "node-feat.csv", np.arange(10, dtype=float).reshape(5, 2) / 10, gz)
    (raw / "node-label.csv").write_text("0\n1\n\n2\n1\n")  # vertex 2 unlabelled
    split = root / "split" / "random"
    split.mkdir(parents=True)
    for name, ids in (("train", [0, 1]), ("valid", [3]), ("test", [4])):
        _write_csv(split / f"{name}.csv", ids, gz)
    return root


def test_ogb_folder_loads(tmp_path):
    from spmmgnn.data.loaders import load_graph

    g = load_graph(make_ogb(tmp_path / "ogbn-tiny"))
    assert g.n == 5 and g.name == "ogbn-tiny" and g.directed
    # edge src->dst is A[dst, src]; duplicates merged
    assert g.adj[1, 0] == 1 and g.adj[0, 1] == 0 and g.adj.nnz == 5
    assert g.features.dtype == np.float32 and g.features.shape == (5, 2)
    assert g.labels.tolist() == [0, 1, -1, 2, 1] and g.num_classes == 3
    assert g.masks["train"].tolist() == [True, True, False, False, False]
    assert g.masks["val"][3] and g.masks["test"][4]


def test_ogb_folder_errors(tmp_path):
    from spmmgnn.data.loaders import load_graph

    (tmp_path / "empty").mkdir()
    with pytest.raises(SpmmgnnError, match="edge.csv"):
        load_graph(tmp_path / "empty")
    root = make_ogb(tmp_path / "bad", gz=False)
    (root / "raw" / "edge.csv").write_text("0,1\n1,9\n")
    with pytest.raises(SpmmgnnError, match="out of range"):
        load_graph(root)


# ------------------------------------------------------------------ WordNet
WN = {
    "noun": [
        "00001740 03 n 01 entity 0 001 ~ 00001930 n 0000 | that which is perceived",
        "00001930 03 n 01 physical_entity 0 002 @ 00001740 n 0000 + 00000020 v 0101 "
        "| an entity that has physical existence",
        "00002000 05 n 02 dog 0 domestic_dog 0 001 @ 00001930 n 0000 | a domestic animal",
    ],
    "verb": ["00000020 29 v 01 breathe 0 001 + 00001930 n 0101 01 + 02 00 | draw air; "
             "\"breathe deeply\""],
    "adj": ["00000030 00 a 01 able 0 001 ! 00000040 a 0101 | having the means",
            "00000040 00 s 01 unable 0 001 ! 00000030 a 0101 | not having the means"],
    "adv": ["00000050 02 r 01 well 0 000 | in a good manner"],
}


def make_wordnet(folder: Path) -> Path:
    folder.mkdir()
    for name, lines in WN.items():
        header = "  1 This software and database is being provided\n"
        (folder / f"data.{name}").write_text(header + "\n".join(lines) + "\n")
    return folder


def test_wordnet_parser(tmp_path):
    keys, labels, a, b, glosses, words = parse_wordnet(make_wordnet(tmp_path / "wn"))
    assert keys.size == 7
    assert labels.tolist() == [3, 3, 5, 29, 0, 0, 2]
    assert words[2] == "dog domestic_dog" and glosses[3].startswith("draw air")
    pairs = {(int(x), int(y)) for x, y in zip(a, b, strict=True)}
    assert (0, 1) in pairs and (1, 3) in pairs and (3, 1) in pairs  # noun <-> verb pointer
    assert (4, 5) in pairs and (5, 4) in pairs  # adjective satellite 's' found in data.adj


def test_wordnet_missing_package_is_a_clear_error(tmp_path):
    with pytest.raises(SpmmgnnError, match="wordnet-base"):
        find_wordnet(tmp_path)


def test_datasets_wordnet_command_without_the_package(tmp_path):
    from spmmgnn.cli import build_parser

    args = build_parser().parse_args(["datasets", "wordnet", "--wordnet-dir",
                                      str(tmp_path / "nowhere"), "--out", str(tmp_path / "w.h5")])
    with pytest.raises(SpmmgnnError, match="apt-get install wordnet-base"):
        args.func(args)
    assert not (tmp_path / "w.h5").exists()


def test_tfidf_and_svd():
    texts = ["the cat sat", "the dog sat", "a cat and a dog", "stocks fell sharply",
             "stocks rose", "the cat"]
    M = tfidf(texts, min_df=2)
    np.testing.assert_allclose(np.sqrt(M.multiply(M).sum(1)), 1.0)
    X = randomized_svd(M, 3, seed=0)
    U, s, _ = np.linalg.svd(M.toarray(), full_matrices=False)
    np.testing.assert_allclose(np.abs(X), np.abs(U[:, :3] * s[:3]), atol=1e-8)


def test_wordnet_converter_writes_hdf5(tmp_path):
    from spmmgnn.data.h5graph import read_block_row
    from spmmgnn.data.partitioned import write_partitioned
    from spmmgnn.data.wordnet import wordnet_graph

    g = wordnet_graph(make_wordnet(tmp_path / "wn"), dim=3, seed=0)
    assert g.num_classes == 45 and g.features.shape == (7, 3)
    assert (g.adj != g.adj.T).nnz == 0
    out = tmp_path / "wn.h5"
    write_partitioned(g, out, parts=2)
    b = read_block_row(out, block=1)
    assert b.lo == 4 and b.hi == 7 and b.num_classes == 45
    assert b.labels.tolist() == g.labels[4:].tolist()


@pytest.mark.slow
@pytest.mark.skipif(not Path("/usr/share/wordnet/data.noun").exists(),
                    reason="Debian's wordnet-base is not installed")
def test_real_wordnet():
    keys, labels, a, b, glosses, _ = parse_wordnet()
    assert keys.size == 117659 and np.unique(labels).size == 45
    assert a.size > 300000


# ------------------------------------------------------------------ HDF5 via datasets
def test_convert_ogb_folder_to_partitioned_hdf5(tmp_path):
    from spmmgnn.commands.datasets import info
    from spmmgnn.data.h5graph import read_block_row
    from spmmgnn.data.loaders import load_graph
    from spmmgnn.data.partitioned import write_partitioned

    g = load_graph(make_ogb(tmp_path / "ogbn-tiny"))
    out = tmp_path / "tiny.h5"
    write_partitioned(g, out, parts=3)
    text = info(out)
    assert "n=5" in text and "block rows=3" in text
    rows = [read_block_row(out, block=b) for b in range(3)]
    assert sum(r.hi - r.lo for r in rows) == 5
    full = sp.vstack([r.adj for r in rows])
    assert (full != g.adj).nnz == 0
    assert np.concatenate([r.labels for r in rows]).tolist() == g.labels.tolist()
    assert rows[0].masks["train"].tolist() == [True, True]


def test_gcn_norm_pattern_equals_gcn_norm(tmp_path):
    """``gcn_norm_pattern`` on memory-mapped lean files (int64 indptr, int32 indices, no
    values; some rows with their self loop, an isolated vertex) is ``gcn_norm`` of the 0/1
    matrix: same pattern, sorted, values to float32 rounding."""
    from spmmgnn.data.normalize import gcn_norm, gcn_norm_pattern

    B = sp.random(300, 300, density=0.02, format="csr", random_state=3)
    A = sp.csr_array(((B + B.T) > 0).astype(np.float64))
    A = sp.csr_array(A.multiply(np.arange(300) != 7).multiply((np.arange(300) != 7)[:, None]))
    A = sp.csr_array(A + sp.diags_array((np.arange(300) % 5 == 0).astype(float)))
    A.eliminate_zeros()
    A.data[:] = 1.0
    A.sort_indices()
    np.save(tmp_path / "g.indptr.npy", A.indptr.astype(np.int64))
    np.save(tmp_path / "g.indices.npy", A.indices.astype(np.int32))
    got = gcn_norm_pattern(np.load(tmp_path / "g.indptr.npy", mmap_mode="r"),
                           np.load(tmp_path / "g.indices.npy", mmap_mode="r"))
    ref = gcn_norm(A)
    assert got.dtype == np.float32 and got.indices.dtype == np.int32 and got.has_sorted_indices
    assert np.array_equal(got.indptr, ref.indptr) and np.array_equal(got.indices, ref.indices)
    np.testing.assert_allclose(got.data, ref.data, rtol=1e-6)
    assert got[[7]].nnz == 1 and got[7, 7] == 1.0
