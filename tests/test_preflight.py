"""Nothing silently wrong, nothing killed (issue 41): a size a flag or a file declares is
checked against the node's memory before it is allocated (one line with the bytes needed and
the bytes available, not an OOM kill or a traceback); weights that make a normalization
undefined are refused; a stored ``perm`` that is not a permutation is refused. The
single-rank probes run the command line in this process (``cli.main``), the others under
``mpiexec -n 2``."""

from __future__ import annotations

import re

import numpy as np
import pytest

from spmmgnn import SpmmgnnError
from spmmgnn.data.csbm import csbm
from spmmgnn.data.h5graph import read_block_row, write_graph

from .mpi import one_line_error, run_cli

EPOCH = ["--epochs", "1", "--hidden", "8", "--quiet"]
NEEDS = r"needs about [\d,.]+ [KMGT]iB and this node has [\d,.]+ [KMGT]iB available"


def _main(capsys, *argv: str) -> tuple[int, str]:
    from spmmgnn.cli import main

    code = main(list(argv))
    return code, capsys.readouterr().err


@pytest.mark.parametrize("argv, words", [
    (["spmm", "--graph", "random", "--n", "0"], "--repeat, --features and --n must be positive"),
    (["spmm", "--scale", "40"], "R-MAT scale 40 (1.1e+12 vertices, 3.52e+13 entries) needs"),
    (["spmm", "--graph", "random", "--n", "1000", "-f", "1000000000000"],
     "the 1000 x 1000000000000 dense input and result (-f 1000000000000) needs"),
    (["model", "rmat:scale=45", "--memory", "--P", "2"], "R-MAT scale 45"),
    (["train", "--csbm-n", "10000000000", *EPOCH], "csbm (1e+10 vertices"),
    (["datasets", "csbm", "--n", "100000000", "--features", "1000", "--out", "x.h5"],
     "csbm (1e+08 vertices"),
])
def test_sizes_from_flags_are_checked_before_allocating(capsys, tmp_path, monkeypatch, argv,
                                                        words):
    monkeypatch.chdir(tmp_path)
    code, err = _main(capsys, *argv)
    assert code == 2 and err.count("error:") == 1 and "Traceback" not in err, err[-3000:]
    assert words in err, err[-3000:]
    if "must be positive" not in words:
        assert re.search(NEEDS, err), err


def test_a_model_too_large_for_the_node_is_refused_before_it_is_built():
    proc = run_cli(2, "train", "--csbm-n", "300", "--epochs", "1", "--quiet", "--hidden",
                   "1000000000")
    one_line_error(proc, "the model (2 layers 64 -> 1000000000 -> 8", "per rank x 2 ranks on "
                   "this node and this node has", "lower --hidden or --layers")


# ------------------------------------------------------------------ data validation
@pytest.fixture(scope="module")
def small():
    return csbm(n=300, avg_degree=6, num_features=8, num_classes=4, seed=5)


def _h5(path, g, **changes):
    arrays = dict(features=g.features, labels=g.labels, masks=g.masks, num_classes=4)
    arrays.update(changes)
    write_graph(path, arrays.pop("adj", g.adj), offsets=[0, 130, 300], **arrays)
    return str(path)


def test_negative_weights_are_refused_on_the_block_row_path(tmp_path, small):
    A = small.adj.copy()
    A.data = A.data.astype(np.float64)
    row = 200  # in the second block row: rank 1 finds it, every rank says it
    A.data[A.indptr[row]:A.indptr[row + 1]] = -3.0
    proc = run_cli(2, "train", "--dataset", _h5(tmp_path / "neg.h5", small, adj=A), *EPOCH)
    one_line_error(proc, "the 'gcn' normalization is undefined", f"first vertex {row} with",
                   "make the edge weights non-negative")


@pytest.mark.parametrize("perm, words", [
    (np.r_[np.arange(299), 17], "1 id(s) appear more than once (first: 17)"),
    (np.arange(300) + 10**12, "perm[0] = 1000000000000"),
])
def test_a_stored_perm_that_is_no_permutation_is_refused(tmp_path, small, perm, words):
    path = _h5(tmp_path / "perm.h5", small, perm=perm)
    proc = run_cli(2, "train", "--dataset", path, *EPOCH)
    one_line_error(proc, "perm is not a permutation of 0..299", words)


def test_the_whole_perm_is_checked_where_it_is_read(tmp_path, small):
    path = _h5(tmp_path / "zeros.h5", small, perm=np.zeros(300, dtype=np.int64))
    with pytest.raises(SpmmgnnError, match=r"1 id\(s\) appear more than once \(first: 0\)"):
        read_block_row(path)  # partition's source_perm and load_h5 read it whole
    assert read_block_row(path, 0, 1, whole_perm=False).ids.tolist() == [0]  # a slice is in range
