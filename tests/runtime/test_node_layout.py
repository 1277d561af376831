"""The default layout of a node (spmmgnn.runtime.node_layout): cpulists, NUMA domains from a sysfs
tree, the line ``spmmgnn train`` prints when it chose the threads itself."""

from __future__ import annotations

import pytest

from spmmgnn.runtime.node_layout import NodeLayout, choose_layout, numa_domains, parse_cpulist

from ..mpi import run_cli


def test_cpulist_format():
    assert parse_cpulist("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    assert parse_cpulist("5") == {5} and parse_cpulist("") == set()


def test_numa_domains_of_the_cores_given(tmp_path):
    for i, cpus in enumerate(["0-3", "4-7", "8-11"]):
        (tmp_path / f"node{i}").mkdir()
        (tmp_path / f"node{i}" / "cpulist").write_text(cpus + "\n")
    (tmp_path / "possible").write_text("0-2\n")          # not a domain
    assert numa_domains({1, 2, 5}, tmp_path) == [{1, 2}, {5}]
    assert numa_domains({0, 1}, tmp_path / "absent") == [{0, 1}]   # no sysfs: one domain


def test_the_line_says_the_split_and_hints_at_domains():
    line = NodeLayout(2, 8, 16, 1).line()
    assert line == ("node layout: 2 rank(s)/node x 8 thread(s)/rank = 16 of 16 cores, "
                    "1 NUMA domain(s)")
    assert "hint: a multiple of 2 ranks" in NodeLayout(1, 16, 16, 2).line()
    assert "hint" not in NodeLayout(4, 4, 16, 2).line()


def test_one_process_gets_its_cores(monkeypatch):
    monkeypatch.setenv("SPMMGNN_THREADS", "3")
    layout = choose_layout()
    assert layout.threads == 3 and layout.ranks_per_node == 1 and layout.cores >= 1


@pytest.mark.parametrize("threads", [None, "1"])
def test_train_prints_what_it_chose(threads):
    """Without --threads rank 0 prints the layout once; with --threads it does not."""
    args = ["train", "--csbm-n", "300", "--epochs", "1", "--hidden", "8"]
    if threads:
        args += ["--threads", threads]
    proc = run_cli(2, *args, env={"SPMMGNN_THREADS": ""})
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [s for s in proc.stdout.splitlines() if s.startswith("node layout:")]
    if threads:
        assert lines == []
    else:
        assert len(lines) == 1 and lines[0].startswith("node layout: 2 rank(s)/node x "), lines
