"""Training written once against the grid's backend and transport: the torch backend on
``device="cpu"`` over Gloo (torch.distributed) and over MPI (staged through host buffers)
equals the host backend over MPI loss by loss (rtol 1e-5, dropout 0) for every family; the
gradient sums, posted bucket by bucket during the backward, give the host's bits whatever
the buckets; over Gloo nothing of a step crosses to the host but the evaluation sums, over
MPI every staged byte is counted. And ``--transport`` on ``train`` and ``spmm``."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ..mpi import run_cli

EPOCHS = 5  # (transport_train.py's)
LAUNCHES = {2: ["sparse1d"],
            4: ["sparse15d", "oblivious2d", "sparse2d", "sparse3d", "plexus3d"]}
CASES = [(P, name) for P, names in LAUNCHES.items() for name in names]


def relative(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    assert a.shape == b.shape and a.size
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(a), 1e-30)))


@pytest.mark.parametrize("P, name", CASES)
def test_torch_backend_over_gloo_equals_host_over_mpi(P, name, mpi_json):
    enabled = ",".join(LAUNCHES[P])
    runs = mpi_json(P, "transport_train.py", enabled, timeout=900)["cases"][name]
    for run, got in runs.items():
        assert "error" not in got, (name, run, got.get("error"))
    host, buckets = runs["host-mpi"], runs["host-mpi-buckets"]
    gloo, staged = runs["cpu-gloo"], runs["cpu-mpi"]
    assert (host["device"], host["transport"]) == ("none", "mpi")
    assert (gloo["device"], gloo["transport"]) == ("cpu", "torch.distributed (gloo)")
    assert (staged["device"], staged["transport"]) == ("cpu", "mpi")
    assert len(host["losses"]) == EPOCHS
    # one bucket per parameter, posted as the backward fills them: the same bits
    assert host["buckets"] == 1 and buckets["buckets"] == host["params"] > 1
    assert buckets["losses"] == host["losses"] and buckets["val"] == host["val"]
    for got in (gloo, staged):
        assert got["buckets"] == got["params"]
        assert relative(host["losses"], got["losses"]) <= 1e-5, (name, host, got)
        assert relative([v for v in host["val"] if v is not None],
                        [v for v in got["val"] if v is not None]) <= 1e-5
    # over Gloo a step stages nothing: only the six evaluation sums reach the host
    evaluations = 6 * 8 * gloo["evaluations"]
    assert gloo["device_host"] - gloo["device_host_setup"] == evaluations
    if name == "sparse1d":  # over MPI: each exchanged row, the gradient buffer each step
        step = staged["bytes_sent"] + EPOCHS * staged["flat_bytes"] + evaluations
        assert staged["device_host"] - staged["device_host_setup"] == step, staged
        # and rank 0's parameters, which it broadcasts at set-up
        assert staged["device_host_setup"] - gloo["device_host_setup"] == staged["param_bytes"]


def test_transport_flag_of_train_and_spmm(tmp_path):
    """``--transport torch`` trains over Gloo on a device="cpu" grid and the header and the
    JSON name it; ``spmm --transport torch`` checks its product against scipy."""
    out = tmp_path / "run.json"
    proc = run_cli(2, "train", "--csbm-n", "300", "--csbm-features", "8", "--hidden", "8",
                   "--epochs", "2", "--device", "cpu", "--transport", "torch", "--json",
                   str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| device=cpu, transport=torch.distributed (gloo)" in proc.stdout
    got = json.loads(out.read_text())
    assert got["transport"] == "torch.distributed (gloo)" and got["epochs_run"] == 2
    assert got["config"]["transport"] == "torch" and got["spec"]["transport"] == "torch"
    out = tmp_path / "spmm.json"
    proc = run_cli(2, "spmm", "--scale", "8", "--algorithm", "sparse1d", "--transport",
                   "torch", "--repeat", "2", "--json", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    (row,) = json.loads(out.read_text())
    assert row["transport"] == "torch.distributed (gloo)" and row["max_rel_error"] <= 1e-5
