"""Nothing killed (issue 41): a size a flag declares is checked against the node's memory
before it is allocated (one line with the bytes needed and the bytes available, not an OOM
kill or a traceback), run through the command line in this process (``cli.main``); a
``perm`` read whole is checked to be a permutation. The 2-rank cases (a model too large,
bad data on the HDF5 block-row path) are in ``tests/algorithms/test_agreement.py``'s one
launch."""

from __future__ import annotations

import re

import numpy as np
import pytest

from spmmgnn import SpmmgnnError
from spmmgnn.data.csbm import csbm
from spmmgnn.data.h5graph import read_block_row, write_graph

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


@pytest.fixture(scope="module")
def small():
    return csbm(n=300, avg_degree=6, num_features=8, num_classes=4, seed=5)


def test_the_whole_perm_is_checked_where_it_is_read(tmp_path, small):
    path = tmp_path / "zeros.h5"
    write_graph(path, small.adj, perm=np.zeros(300, dtype=np.int64), features=small.features)
    with pytest.raises(SpmmgnnError, match=r"1 id\(s\) appear more than once \(first: 0\)"):
        read_block_row(path)  # partition's source_perm and load_h5 read it whole
    assert read_block_row(path, 0, 1, whole_perm=False).ids.tolist() == [0]  # a slice is in range
