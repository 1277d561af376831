"""GNN training over MPI: parity with single-process PyTorch, the CLI, checkpoints and resume."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from spmmgnn import ALGORITHMS
from spmmgnn.data.csbm import csbm
from spmmgnn.nn import aggregate_first, build_model, dropout_mask

from ..mpi import mpiexec, run_cli, run_mpi
from ..workers.common import one_way

RTOL = 1e-4


def parity_results(P: int, mpi_json) -> dict:
    return mpi_json(P, "train_parity.py")


# ------------------------------------------------------------------ single-process reference
def dense_operator(A: np.ndarray, kind: str) -> np.ndarray:
    """Â written directly from the definitions, densely (row = target)."""
    if kind == "gcn":
        B = A.copy()
        diag = np.diag_indices_from(B)
        B[diag] = np.where(B[diag] == 0, 1.0, B[diag])
        d = B.sum(axis=1)
        s = np.where(d > 0, d ** -0.5, 0.0)
        return s[:, None] * B * s[None, :]
    d = A.sum(axis=1)
    return np.where(d[:, None] > 0, A / np.where(d > 0, d, 1)[:, None], 0.0)


def reference_run(graph_spec: dict, case: dict) -> dict:
    """Plain PyTorch full-graph training with a dense adjacency; same seed and masks."""
    g = csbm(**graph_spec)
    if case.get("directed"):
        g = one_way(g)
    kind = case["model"]
    A_hat = torch.from_numpy(dense_operator(g.adj.toarray(), kind).astype(np.float32))
    x = torch.from_numpy(g.features)
    y = torch.from_numpy(g.labels)
    masks = {k: torch.from_numpy(v) for k, v in g.masks.items()}
    n = g.n
    init = build_model(kind, x.shape[1], case["hidden"], g.num_classes, case["layers"],
                       seed=5, layernorm=case["layernorm"]).state_dict()
    params = {k: v.clone().requires_grad_(True) for k, v in init.items()}
    opt = torch.optim.Adam(list(params.values()), lr=0.01, weight_decay=5e-4)
    ids = np.arange(n)

    def forward(step: int, training: bool) -> torch.Tensor:
        h = x
        for i in range(case["layers"]):
            p = case["input_dropout"] if i == 0 else case["dropout"]
            if training and p > 0:
                h = h * torch.from_numpy(dropout_mask(ids, h.shape[1], p, 5, step, i))
            if kind == "gcn":
                z = A_hat @ h @ params[f"convs.{i}.weight"] + params[f"convs.{i}.bias"]
            else:
                z = (h @ params[f"convs.{i}.weight_self"]
                     + A_hat @ h @ params[f"convs.{i}.weight_neigh"] + params[f"convs.{i}.bias"])
            if i < case["layers"] - 1:
                if case["layernorm"]:
                    z = F.layer_norm(z, (z.shape[1],), params[f"norms.{i}.weight"],
                                     params[f"norms.{i}.bias"])
                z = torch.relu(z)
            h = z
        return h

    losses = []
    for step in range(1, case["epochs"] + 1):
        opt.zero_grad()
        out = forward(step, True)
        loss = F.cross_entropy(out[masks["train"]], y[masks["train"]])
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    with torch.no_grad():
        pred = forward(0, False).argmax(1)
    acc = {f"{s}_acc": float((pred[m] == y[m]).double().mean()) for s, m in masks.items()}
    return dict(losses=losses, **acc)




# ------------------------------------------------------------------ parity
@pytest.mark.parametrize("P", [2, 3, 4])
@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_parity_with_single_process(P, algorithm, mpi_json, reference_for):
    """Same seed and data: each algorithm at P ranks (1.5D with c=2 at P=4, 2D/3D on the
    grid closest to a square / cube: 2x2 and 2x1x2 at P=4) gives the losses of plain
    single-process PyTorch per epoch (rtol 1e-4, 20 epochs) and the same accuracy."""
    res = parity_results(P, mpi_json)
    cases = [c for c in res["cases"] if c["algorithm"] == algorithm]
    assert cases, f"{algorithm} did not run at P={P}"
    if "15d" in algorithm and P == 4:
        assert all(c["c"] == 2 for c in cases)
    for case in cases:
        label = f"{algorithm} P={P} c={case['c']} {case['model']} {case['partition']}"
        assert "error" not in case, f"{label}: {case.get('error')}"
        ref = reference_for(res["graph"], case)
        np.testing.assert_allclose(case["losses"], ref["losses"], rtol=RTOL, err_msg=label)
        for split in ("train_acc", "val_acc", "test_acc"):
            assert case["final"][split] == pytest.approx(ref[split], abs=1e-9), (label, split)


def test_parity_on_a_3x3_grid(mpi_json, reference_for):
    """The 2D algorithms at P = 9 on a 3 x 3 grid: the losses of single-process PyTorch."""
    res = mpi_json(9, "train_parity.py", "oblivious2d", "sparse2d", timeout=900)
    assert len(res["cases"]) == 6
    for case in res["cases"]:
        label = f"{case['algorithm']} P=9 {case['grid']} {case['model']} {case['partition']}"
        assert "error" not in case and case["grid"] == [3, 3], (label, case.get("error"))
        ref = reference_for(res["graph"], case)
        np.testing.assert_allclose(case["losses"], ref["losses"], rtol=RTOL, err_msg=label)


def test_parity_sees_uneven_and_empty_blocks(mpi_json, reference_for):
    res = parity_results(3, mpi_json)
    empty = [c for c in res["cases"] if c["partition"] == "empty_block"]
    assert empty and empty[0]["sizes"][1] == 0
    ref = reference_for(res["graph"], empty[0])
    np.testing.assert_allclose(empty[0]["losses"], ref["losses"], rtol=RTOL)


def test_symmetry_probe(mpi_json):
    """GCN on an undirected graph is symmetric (backward uses the forward kernel); the mean
    operator and a directed graph's GCN operator are not."""
    for c in parity_results(2, mpi_json)["cases"]:
        expected = c["model"] == "gcn" and not c.get("directed")
        assert c["symmetric"] == expected, c["algorithm"]


def test_multiplication_order():
    # first layer, input needs no gradient: (A X) W ships f_in once, A (X W) 2 f_out
    assert aggregate_first(128, 16, input_needs_grad=False, training=True) is False
    assert aggregate_first(128, 128, input_needs_grad=False, training=True) is True
    # hidden layer in training: f_in twice vs f_out twice
    assert aggregate_first(64, 8, input_needs_grad=True, training=True) is False
    assert aggregate_first(8, 64, input_needs_grad=True, training=True) is True
    # inference: fewer columns wins
    assert aggregate_first(64, 8, input_needs_grad=False, training=False) is False


def test_dropout_masks_do_not_depend_on_layout():
    ids = np.arange(1000)
    full = dropout_mask(ids, 32, 0.4, seed=3, step=7, layer=1)
    sub = np.random.default_rng(0).permutation(1000)[:300]
    np.testing.assert_array_equal(dropout_mask(sub, 32, 0.4, 3, 7, 1), full[sub])
    kept = (full > 0).mean()
    assert abs(kept - 0.6) < 0.02
    assert np.allclose(full[full > 0], 1 / 0.6)
    assert not np.array_equal(full, dropout_mask(ids, 32, 0.4, 3, 8, 1))  # new per step


# ------------------------------------------------------------------ the command
def test_train_cli_json_and_breakdown(tmp_path):
    out = tmp_path / "run.json"
    proc = run_cli(2, "train", "--csbm-n", "3000", "--epochs", "30", "--json", str(out),
                   "--hidden", "32", "--layernorm")
    assert proc.returncode == 0, proc.stderr
    r = json.loads(out.read_text())
    assert r["P"] == 2 and r["epochs_run"] == 30 and len(r["history"]) == 30
    assert set(r["breakdown"]) == {"spmm_local", "exchange", "allreduce", "dense", "other"}
    assert all(set(h["breakdown"]) == set(r["breakdown"]) for h in r["history"])
    for h in r["history"]:  # the parts are times that add up to the epoch
        parts = h["breakdown"]
        assert all(v >= 0 for v in parts.values()), parts
        assert sum(parts.values()) == pytest.approx(h["seconds"], rel=1e-9), parts
        for key in ("spmm_local", "exchange", "allreduce", "dense"):  # P = 2: all happen
            assert parts[key] > 0, (key, parts)
    # "other" is timed by its own windows (zeroing, finite checks), not a remainder forced to 0
    assert all(h["breakdown"]["other"] > 0 for h in r["history"])
    assert r["epoch_seconds"] == pytest.approx(
        np.mean([h["seconds"] for h in r["history"][1:]]), rel=1e-9)
    assert r["final"]["test_acc"] > 0.6
    assert r["history"][-1]["loss"] < r["history"][0]["loss"]
    # no --exchange on one machine: the ranks read each other's rows in place, no message
    assert r["exchange"]["option"] == "node" and len(r["ranks"]) == 2
    assert all(x["bytes_sent"] == 0 and x["bytes_shared_read"] > 0 for x in r["ranks"])
    # one time per epoch, explained: the steady epoch's wall time is the training step, the
    # evaluation and the rest; the first epoch (kernel set-up) is kept apart
    assert r["steady_epoch_wall_seconds"] >= r["epoch_seconds"] + r["eval_seconds"] > 0
    assert r["steady_epoch_wall_seconds"] == pytest.approx(
        np.mean([h["wall_seconds"] for h in r["history"][1:]]), rel=1e-9)
    assert r["first_epoch_seconds"] == r["history"][0]["wall_seconds"]
    assert r["wall_seconds"] >= sum(h["wall_seconds"] for h in r["history"])
    # progress on rank 0 only and on stdout with the results, in order: header, epochs, done
    out = proc.stdout
    assert out.count("spmmgnn train:") == 1 and "spmmgnn train:" not in proc.stderr
    assert "codec=none exact" in out and "partitioner=none" in out
    order = [out.index(s) for s in ("spmmgnn train:", "epoch  1/30", "epoch 30/30", "done: 30",
                                    "final epoch 30: loss", "best-validation epoch")]
    assert order == sorted(order), out
    assert f"then {r['steady_epoch_wall_seconds'] * 1e3:.1f} ms/epoch" in out


@pytest.mark.slow
def test_hdf5_blocks_give_the_same_training(tmp_path):
    """A file written with 3 block rows, trained at P=3 (each rank reads its file block) and
    at P=2 (contiguous ranges of the file): one computation, one loss curve."""
    from spmmgnn.data.partitioned import write_partitioned

    h5 = tmp_path / "g.h5"
    write_partitioned(csbm(n=1500), h5, parts=3)
    curves = []
    for P in (3, 2):
        out = tmp_path / f"r{P}.json"
        proc = run_cli(P, "train", "--dataset", str(h5), "--epochs", "8", "--json", str(out),
                       "--quiet", "--model", "sage")
        assert proc.returncode == 0, proc.stderr
        r = json.loads(out.read_text())
        curves.append([h["loss"] for h in r["history"]])
        # at P = 3 the file's own blocks, named by the method that wrote them
        assert r["data_info"]["partition"] == ("file:contiguous" if P == 3 else "contiguous")
        warned = proc.stderr.count("is laid out for 3 block rows and this run has 2")
        assert warned == (P == 2), proc.stderr  # once, by rank 0, only when it is dropped
        assert r["n"] == 1500 and r["num_classes"] == 8
    np.testing.assert_allclose(curves[0], curves[1], rtol=1e-5)


def test_user_errors_are_one_line(tmp_path):
    proc = run_cli(2, "train", "--dataset", str(tmp_path / "missing.h5"), "--epochs", "1")
    assert proc.returncode == 2
    assert proc.stderr.count("error:") == 1 and "missing.h5" in proc.stderr
    proc = run_cli(2, "train", "--epochs", "1", "--replication", "3", "--csbm-n", "500")
    assert proc.returncode == 2 and "replication" in proc.stderr


# ------------------------------------------------------------------ checkpoints
def _params(path: Path) -> dict:
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files if k != "meta"}


@pytest.mark.slow
def test_resume_after_kill_matches_uninterrupted(tmp_path):
    common = ["--csbm-n", "1500", "--epochs", "12", "--hidden", "16", "--dropout", "0.5",
              "--input-dropout", "0.1", "--quiet"]
    full = tmp_path / "full.npz"
    proc = run_cli(2, "train", *common, "--checkpoint", str(full))
    assert proc.returncode == 0, proc.stderr
    part = tmp_path / "part.npz"
    killed = run_mpi(2, "train_resume.py", "7", "train", *common, "--checkpoint", str(part),
                     "--checkpoint-every", "5", check=False)
    assert killed.returncode != 0, "the run should have been killed after epoch 7"
    with np.load(part, allow_pickle=False) as z:
        assert json.loads(str(z["meta"]))["epoch"] == 5
    assert not list(tmp_path.glob(".part.npz.*")), "a temporary checkpoint was left behind"
    proc = run_cli(2, "train", *common, "--checkpoint", str(part), "--resume")
    assert proc.returncode == 0, proc.stderr
    a, b = _params(full), _params(part)
    assert set(a) == set(b) and any(k.startswith("opt/") for k in a)
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=1e-6, atol=1e-7, err_msg=k)
    ha = json.loads(str(np.load(full)["meta"]))["history"]
    hb = json.loads(str(np.load(part)["meta"]))["history"]
    assert [h["epoch"] for h in hb] == list(range(1, 13))
    np.testing.assert_allclose([h["loss"] for h in ha], [h["loss"] for h in hb], rtol=1e-6)


def _local_trainer(tmp_path, **overrides):
    from mpi4py import MPI

    from spmmgnn import ProcessGrid
    from spmmgnn.training import TrainConfig, Trainer, distribute_graph

    grid = ProcessGrid(MPI.COMM_SELF)
    data = distribute_graph(csbm(n=400), grid, "gcn")
    cfg = dict(epochs=2, progress=False, checkpoint=str(tmp_path / "c.npz"))
    cfg.update(overrides)
    return Trainer(data, TrainConfig(**cfg))


def test_resume_rejects_a_different_run(tmp_path):
    from spmmgnn import SpmmgnnError

    with pytest.raises(SpmmgnnError, match="does not exist"):
        _local_trainer(tmp_path, resume=True)
    _local_trainer(tmp_path).fit()
    resumed = _local_trainer(tmp_path, resume=True, epochs=3)
    assert resumed.start_epoch == 3 and len(resumed.history) == 2
    with pytest.raises(SpmmgnnError, match="hidden 64 != 32"):
        _local_trainer(tmp_path, resume=True, epochs=4, hidden=32)


def test_checkpoint_write_is_atomic(tmp_path, monkeypatch):
    from spmmgnn.training import checkpoint

    model = build_model("gcn", 4, 8, 3)
    opt = torch.optim.Adam(model.parameters())
    path = tmp_path / "ck.npz"
    checkpoint.save_checkpoint(path, model, opt, 1, [], {"a": 1})
    before = path.read_bytes()

    def broken(fh, **arrays):
        fh.write(b"PK\x03\x04 half a zip")
        raise OSError("disk full")

    monkeypatch.setattr(checkpoint.np, "savez", broken)
    with pytest.raises(checkpoint.SpmmgnnError, match="cannot write checkpoint .*: disk full"):
        checkpoint.save_checkpoint(path, model, opt, 2, [], {"a": 1})
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["ck.npz"]
    meta, arrays = checkpoint.read_checkpoint(path)
    assert meta["epoch"] == 1 and "param/convs.0.weight" in arrays


def test_mpiexec_found():
    assert Path(mpiexec()).name.startswith("mpiexec")


def test_run_spec_is_the_train_command():
    """``RunSpec`` (what ``spmmgnn bench`` and library callers build) has exactly the train
    command's flags, with its defaults: the CLI is a thin shell over ``run_training``."""
    from dataclasses import fields

    from spmmgnn.cli import build_parser
    from spmmgnn.training import RunSpec

    args = build_parser().parse_args(["train"])
    assert set(vars(args)) - {"command", "func", "file_inputs", "file_outputs"} == {
        f.name for f in fields(RunSpec)}  # (file_roles: which flags name files, for check_files)
    assert RunSpec.from_args(args) == RunSpec()
    assert RunSpec.from_args(build_parser().parse_args(
        ["train", "--epochs", "7", "--codec", "int2"])) == RunSpec(epochs=7, codec="int2")
