"""The results records of ``spmmgnn bench`` (``benchmark.records``, ``benchmark.runs``): an
append on a full disk keeps the old file, and the training records carry the all-reduced
bytes."""

from __future__ import annotations

import subprocess
import sys

import pytest

FULL_APPEND = """
import resource, sys
from spmmgnn import SpmmgnnError
from spmmgnn.benchmark.records import append_record
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[2]), int(sys.argv[2])))
try:
    append_record(sys.argv[1], {"kind": "network", "P": 2, "alpha": 1e-6, "beta": 1e-9,
                                "pad": "x" * 1000})
except SpmmgnnError as exc:
    print(exc)
"""


@pytest.mark.parametrize("old", [None, b'{"kind": "network"}\n'])
def test_bench_results_on_a_full_disk_keep_the_old_file(tmp_path, old):
    """``ulimit -f`` as the full disk: the append fails after part of the record; the file
    is cut back to what it held (a new one removed), not left with a partial or 0-byte
    record."""
    path = tmp_path / "results.jsonl"
    if old is not None:
        path.write_bytes(old)
    limit = 500 + (0 if old is None else len(old))
    proc = subprocess.run([sys.executable, "-c", FULL_APPEND, str(path), str(limit)],
                          capture_output=True, text=True, timeout=120)
    assert "cannot append to results file" in proc.stdout, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    if old is None:
        assert not path.exists()
    else:
        assert path.read_bytes() == old


def test_training_records_carry_the_all_reduced_bytes():
    """replication.png adds them to the exchange; the training records lacked them."""
    from mpi4py import MPI

    from spmmgnn.benchmark.runs import train_run
    from spmmgnn.benchmark.sweep import SweepConfig, runs

    cfg = SweepConfig(graphs=["csbm:n=300,avg_degree=4"], modes=["train"],
                      algorithms=["sparse15d"], epochs=1, features=[8]).check()
    rec = train_run(MPI.COMM_SELF, runs(cfg, 1)[0])
    assert rec["per_rank"]["allreduce_bytes"] == [0]  # c = 1: nothing to all-reduce
