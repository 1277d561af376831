"""``spmmgnn partition``: the permuted graph on disk, its block offsets and the metrics JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import scipy.io
import scipy.sparse as sp

from spmmgnn.data.generators import sbm
from spmmgnn.data.h5graph import read_block_row, read_offsets
from spmmgnn.partitioners import metrics

ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "spmmgnn.cli", "partition", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)


def test_partition_writes_the_permuted_graph(tmp_path):
    A = sbm(600, 6, avg_degree=6, mixing=0.2, seed=0)
    src = tmp_path / "g.npz"
    sp.save_npz(src, sp.csr_matrix(A))
    out, js = tmp_path / "g.h5", tmp_path / "m.json"
    proc = cli(src, "-k", 4, "--method", "metis+maxsend", "-o", out, "--json", js)
    assert proc.returncode == 0, proc.stderr
    assert "max send volume" in proc.stdout and "load imbalance" in proc.stdout
    offsets = read_offsets(out)
    assert offsets.size == 5 and offsets[-1] == 600
    whole = read_block_row(out)
    perm = whole.perm
    np.testing.assert_array_equal(np.sort(perm), np.arange(600))
    # the file holds A relabelled: new row i is old row perm[i]
    assert (whole.adj != sp.csr_array(A)[perm][:, perm]).nnz == 0
    parts = np.empty(600, dtype=np.int64)
    parts[perm] = np.repeat(np.arange(4), np.diff(offsets))
    report = json.loads(js.read_text())
    m = metrics(A, parts, 4)
    assert report["total_volume"] == m.total_volume and report["max_send"] == m.max_send
    assert report["send_volume"] == m.send_volume.tolist()
    assert report["block_sizes"] == np.diff(offsets).tolist()
    # each block row reads on its own
    b = read_block_row(out, block=2)
    assert b.adj.shape == (offsets[3] - offsets[2], 600)


def test_partition_of_a_partitioned_file_keeps_original_ids(tmp_path):
    A = sbm(300, 3, avg_degree=5, mixing=0.3, seed=1)
    src = tmp_path / "g.mtx"
    scipy.io.mmwrite(str(src), sp.coo_matrix(A))
    first, second = tmp_path / "a.h5", tmp_path / "b.h5"
    assert cli(src, "-k", 3, "--method", "random", "-o", first).returncode == 0
    assert cli(first, "-k", 2, "--method", "metis-cut", "-o", second).returncode == 0
    b = read_block_row(second)
    assert (b.adj != sp.csr_array(A)[b.perm][:, b.perm]).nnz == 0


def test_partition_errors_are_one_line(tmp_path):
    src = tmp_path / "g.npz"
    sp.save_npz(src, sp.csr_matrix(sbm(50, 2, seed=0)))
    for args in (("-k", 0), ("-k", 2, "--method", "nope"), ("-k", 2, "--epsilon", -1)):
        proc = cli(src, *args, "-o", tmp_path / "x.h5")
        assert proc.returncode == 2
        assert proc.stderr.startswith("spmmgnn partition: error:")
        assert len(proc.stderr.strip().splitlines()) == 1
    proc = cli(tmp_path / "missing.mtx", "-k", 2, "-o", tmp_path / "x.h5")
    assert proc.returncode == 2 and "does not exist" in proc.stderr
    assert not (tmp_path / "x.h5").exists()


def test_volume_slack_reaches_the_refinement(tmp_path):
    """--volume-slack 0 keeps the total at or below METIS-vol's; the default slack trades
    some of it for a lower max send (measured on this graph: max send 150 vs 144)."""
    from spmmgnn.partitioners import partition

    A = sbm(600, 6, avg_degree=6, mixing=0.2, seed=0)
    src = tmp_path / "g.npz"
    sp.save_npz(src, sp.csr_matrix(A))
    reports = {}
    for name, extra in (("none", ["--volume-slack", "0"]), ("default", [])):
        js = tmp_path / f"{name}.json"
        proc = cli(src, "-k", 4, "--method", "metis-vol+maxsend", "-o", tmp_path / f"{name}.h5",
                   "--json", js, *extra)
        assert proc.returncode == 0, proc.stderr
        reports[name] = json.loads(js.read_text())
    metis_total = partition(A, 4, method="metis-vol").metrics.total_volume
    assert reports["none"]["total_volume"] <= metis_total
    assert reports["default"]["max_send"] < reports["none"]["max_send"]
    bad = cli(src, "-k", 4, "--volume-slack", "-1", "-o", tmp_path / "bad.h5")
    assert bad.returncode == 2 and "volume_slack must be a non-negative number" in bad.stderr
    assert "Traceback" not in bad.stderr and not (tmp_path / "bad.h5").exists()


def test_runs_name_the_partition_and_its_seconds(tmp_path):
    """The method ``datasets --parts`` used is stored in the file: ``datasets info`` and the
    header of a run on the file name it. A run that partitions in memory names the method it
    resolved to, and puts the partition's seconds on its ``done:`` line and in ``--json``."""
    from spmmgnn.commands.datasets import info
    from spmmgnn.data.csbm import csbm
    from spmmgnn.data.partitioned import write_partitioned

    from ..mpi import run_cli

    h5, js = tmp_path / "g.h5", tmp_path / "run.json"
    write_partitioned(csbm(n=800, seed=0), h5, 2, "metis-vol")  # what datasets --parts does
    assert "partition: metis-vol (" in info(h5)
    assert read_block_row(h5, block=0).partition_method == "metis-vol"
    on_file = run_cli(2, "train", "--dataset", str(h5), "--epochs", "2")
    assert on_file.returncode == 0, on_file.stderr
    assert "partitioner=file:metis-vol " in on_file.stdout, on_file.stdout
    in_memory = run_cli(2, "train", "--csbm-n", "800", "--epochs", "2", "--partitioner",
                        "metis-vol+maxsend", "--json", str(js))
    assert in_memory.returncode == 0, in_memory.stderr
    secs = json.loads(js.read_text())["partition_seconds"]
    assert secs > 0
    assert "partitioner=metis-vol+maxsend (metis-vol+maxsend, " in in_memory.stdout
    assert f"(after partitioning in {secs:.1f} s)" in in_memory.stdout, in_memory.stdout


def test_row_weight_from_partition_to_training(tmp_path):
    """``--row-weight``: ``partition`` prints the rows and the weighted balance; ``train``
    on a file whose largest block row holds over 1.5x the average rows says so and names
    the option; the flag without a partitioner, or on a file already partitioned, is one
    error on every rank."""
    from spmmgnn.data.generators import rmat
    from spmmgnn.data.h5graph import write_graph

    from ..mpi import one_line_error, run_cli

    A = sp.csr_array(rmat(10, 8, seed=3))
    n = A.shape[0]
    rng = np.random.default_rng(0)
    src = tmp_path / "rmat.h5"
    write_graph(src, A, features=rng.standard_normal((n, 8)).astype(np.float32),
                labels=rng.integers(0, 3, n), num_classes=3)
    plain, weighed = tmp_path / "plain.h5", tmp_path / "weighed.h5"
    proc = cli(src, "-k", 4, "--method", "mtkahypar", "--threads", 1, "-o", plain)
    assert proc.returncode == 0, proc.stderr
    sizes = np.diff(read_offsets(plain))
    ratio = sizes.max() / sizes.mean()
    assert ratio > 1.5 and f"largest {ratio:.2f}x the average" in proc.stdout
    assert "balanced load imbalance" not in proc.stdout
    proc = cli(src, "-k", 4, "--method", "mtkahypar", "--threads", 1, "--row-weight", 16,
               "-o", weighed)
    assert proc.returncode == 0, proc.stderr
    parts = np.empty(n, dtype=np.int64)
    w_sizes = np.diff(read_offsets(weighed))
    parts[read_block_row(weighed).perm] = np.repeat(np.arange(4), w_sizes)
    loads = np.bincount(parts, weights=np.diff(sp.csr_array(A).indptr) + 16, minlength=4)
    assert f"balanced load imbalance       {loads.max() / loads.mean() - 1:.1%}" in proc.stdout
    assert w_sizes.max() < sizes.max()

    run = run_cli(4, "train", "--dataset", str(plain), "--epochs", "1", "--eval-every", "0",
                  "--hidden", "8")
    assert run.returncode == 0, run.stderr[-3000:]
    assert f"note: the largest block row holds {ratio:.2f}x the average rows" in run.stdout
    assert "--row-weight 16" in run.stdout

    one_line_error(run_cli(2, "train", "--dataset", str(plain), "--row-weight", "16",
                           "--epochs", "1"), "drop --row-weight")
    one_line_error(run_cli(2, "train", "--row-weight", "16", "--epochs", "1"),
                   "--partitioner none", "drop --row-weight")
    proc = cli(src, "-k", 2, "--from-parts", tmp_path / "none.txt", "--row-weight", 4,
               "-o", tmp_path / "x.h5")
    assert proc.returncode != 0 and "--row-weight goes with a partitioner" in proc.stderr
    assert "Traceback" not in proc.stderr
