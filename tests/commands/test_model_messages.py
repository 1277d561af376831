"""What ``spmmgnn model`` (and ``train``'s two-level partition) say, in-process on one rank:
sizes in a unit that shows their difference, the device check before any table, and the
two-level partitioner's errors in the flags the user typed, never from a default list."""

from __future__ import annotations

import re

import pytest

from spmmgnn.runtime.machine import format_bytes_apart

GRAPH = "csbm:n=2000"


def _main(capsys, *argv) -> tuple[int, str, str]:
    from spmmgnn.cli import main

    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def _one_error(code: int, err: str, *words: str) -> None:
    assert code == 2 and err.count("error:") == 1 and "Traceback" not in err, err
    for w in words:
        assert w in err, (w, err)


def test_sizes_apart():
    assert format_bytes_apart(1.9 * 2**20, 0.001 * 2**30) == ["1.9 MiB", "1.0 MiB"]
    assert format_bytes_apart(1.03 * 2**20, 1.02 * 2**20) == ["1.03 MiB", "1.02 MiB"]
    assert format_bytes_apart(2**20 + 1, 2**20) == ["1,048,577 B", "1,048,576 B"]
    assert format_bytes_apart(3 * 2**30, 3 * 2**30, 5) == ["3.0 GiB", "3.0 GiB", "5 B"]


def test_a_small_device_shows_what_differs(capsys):
    code, out, err = _main(capsys, "model", GRAPH, "--memory", "--P", "2", "--algorithm",
                           "sparse1d", "--device-memory", "0.001")
    assert code == 0, err
    verdict = re.search(r"needs ([\d.,]+ \w+) > ([\d.,]+ \w+) \(blocks ([\d.,]+ \w+), "
                        r"exchange ([\d.,]+ \w+), training ([\d.,]+ \w+)\)", out)
    assert verdict, out
    assert verdict[2] == "1.0 MiB" and verdict[1] != verdict[2], verdict[0]
    assert "0.00 GiB" not in out


def test_a_codec_with_device_memory_is_refused_before_any_table(capsys):
    code, out, err = _main(capsys, "model", GRAPH, "--memory", "--P", "2", "--algorithm",
                           "sparse1d", "--device-memory", "80", "--codec", "int8")
    _one_error(code, err, "--device-memory models the device path without a codec")
    assert out == "" and "building" not in err


def test_two_level_leaves_out_default_c_values_that_do_not_fit(capsys):
    code, out, err = _main(capsys, "model", GRAPH, "--memory", "--P", "4", "--algorithm",
                           "sparse15d", "--partitioner", "twolevel:metis-vol",
                           "--parts-per-node", "4")
    assert code == 0 and "error" not in err, err
    assert "leaving out c = 2, 4 of the default --c list" in err
    assert re.search(r"^\s+4\s+c=1\s+sparse15d", out, re.M) and "c=2" not in out, out


@pytest.mark.parametrize("argv, words", [
    (["--memory", "--P", "4", "--c", "1", "2", "--parts-per-node", "4"],
     "not at --P 4 --c 2: 2 block rows, --parts-per-node 4"),
    (["--memory", "--P", "6", "--parts-per-node", "4"],
     "not at --P 6: 6 block rows, --parts-per-node 4"),
    (["--P", "4", "--preset", "ib-hdr"],
     "partitions the nodes first: give --parts-per-node K (the block rows of one node) or "
     "--ranks-per-node K"),
    (["--P", "4", "--preset", "ib-hdr", "--ranks-per-node", "3", "--c", "1"],
     "not at --P 4: 4 block rows, --ranks-per-node 3 / c 1 = 3 per node"),
])
def test_two_level_errors_name_the_flags_given(capsys, argv, words):
    code, out, err = _main(capsys, "model", GRAPH, "--algorithm", "sparse15d",
                           "--partitioner", "twolevel:metis-vol", *argv)
    _one_error(code, err, words)
    assert "parts_per_node" not in err and "k=" not in err and out == "", err


def test_two_level_in_the_flat_time_model_has_its_kept_rows(capsys):
    """The kept layouts' rows (oblivious2d) partition with the nodes' block rows too (they
    were built without them: "got None" after the tables)."""
    code, out, err = _main(capsys, "model", GRAPH, "--P", "4", "--preset", "ib-hdr",
                           "--algorithm", "oblivious2d", "--ranks-per-node", "4",
                           "--partitioner", "twolevel:metis-vol")
    assert code == 0, err
    assert "oblivious2d kept" in out


def test_train_two_level_error_names_its_flags(capsys):
    code, out, err = _main(capsys, "train", "--csbm-n", "300", "--epochs", "1", "--quiet",
                           "--partitioner", "twolevel:metis-vol", "--ranks-per-node", "2")
    _one_error(code, err, "--partitioner twolevel:metis-vol keeps the block rows of one node "
               "together: --ranks-per-node 2 / --replication 1 = 2 block rows per node, which "
               "must divide the 1 block rows of P = 1 ranks / --replication 1")
    assert "parts_per_node" not in err
