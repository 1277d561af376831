"""GCN training with the activations kept in SUMMA's block layout (``TrainConfig.grid_layout``,
``spmmgnn.nn.grid_model``), issue 45: the same losses as the row layout and as one process,
and per rank an epoch moves CAGNET's bytes, the remaining conversions reported apart."""

from __future__ import annotations

import numpy as np
import pytest

SHAPES = {4: "2x2", 9: "3x3", 8: "2x2x2"}


@pytest.fixture(scope="module", params=sorted(SHAPES))
def cases(request, mpi_json):
    P = request.param
    return P, mpi_json(P, "grid_train_cases.py", SHAPES[P], timeout=900)["cases"]


def test_losses_equal_row_layout_and_one_process(cases):
    """3 epochs of a 3-layer GCN with dropout (masks keyed by vertex and feature on the
    blocks), symmetric and directed graphs, n not divisible by the grid, an empty block:
    loss by loss equal to the row-layout run and to P = 1; evaluation too."""
    _, rows = cases
    assert [r["directed"] for r in rows] == [False, True]
    assert [r["symmetric"] for r in rows] == [True, False]
    for r in rows:
        assert 0 in r["sizes"] and r["n"] % len(r["sizes"])
        np.testing.assert_allclose(r["blocks"], r["rows"], rtol=1e-5)
        np.testing.assert_allclose(r["blocks"], r["single"], rtol=1e-5)
        for key in ("train_loss", "val_acc", "test_acc"):
            assert r["acc"][key] == pytest.approx(r["single_acc"][key], rel=1e-5)
            assert r["acc"][key] == pytest.approx(r["row_acc"][key], rel=1e-5)


def test_epoch_bytes_are_cagnets_per_rank(cases):
    """oblivious2d on 2x2 and 3x3 (oblivious3d on 2x2x2): rank by rank, a steady epoch's
    algorithm bytes are CAGNET's training formula (SUMMA's stage tiles at 12 B per non-zero
    and H blocks, the transposed stages on the directed graph, the H W all-gathers; 3D the
    fiber's reduce-scatter / all-gather), computed from scipy in the worker; the logits'
    conversion is reported apart, and is less than the row layout converts."""
    _, rows = cases
    for r in rows:
        for rank, (epochs, formula, row_epochs) in enumerate(
                zip(r["ranks"], r["formula"], r["row_ranks"], strict=True)):
            for epoch in (1, 2):   # epoch 1 also converts the features and caches A X
                assert epochs[epoch] == formula, (r["directed"], rank, epoch)
                assert epochs[epoch][1] < row_epochs[epoch][1], (r["directed"], rank)
        assert any(f[1] > 0 for f in r["formula"])


def test_volume_model_prices_the_kept_epoch(cases):
    """``spmmgnn model``'s kept-layout step (``benchmark.kept_volumes``, from the partition
    alone) equals the measured bytes of epochs 2 and 3 rank by rank, by phase (algorithm,
    convert): 2x2, 3x3, 2x2x2, a symmetric and a directed graph, an empty block."""
    _, rows = cases
    for r in rows:
        for rank, (epochs, model) in enumerate(zip(r["ranks"], r["model"], strict=True)):
            assert epochs[1] == model and epochs[2] == model, (r["directed"], rank)
        assert sum(m[0] for m in r["model"]) > 0 and sum(m[1] for m in r["model"]) > 0


def test_refused_with_one_message_on_every_rank(cases):
    """GraphSAGE in the block layout: the same readable error on every rank."""
    P, rows = cases
    errors = rows[0]["errors"]
    assert len(errors) == P and len(set(errors)) == 1, errors
    assert "block layout needs" in errors[0] and "--model gcn" in errors[0]


def test_dropout_of_a_feature_block_is_the_rows_mask():
    """``relu_dropout(..., col0=a)`` on columns a..b of z: exactly those columns of the
    row layout's fused ReLU-dropout (values and the bias gradient)."""
    import torch

    from spmmgnn.nn.dropout import relu_dropout

    rng = np.random.default_rng(0)
    z = torch.from_numpy(rng.standard_normal((37, 11)).astype(np.float32))
    bias = torch.from_numpy(rng.standard_normal(11).astype(np.float32)).requires_grad_()
    ids = rng.permutation(1000)[:37]
    full = relu_dropout(z, ids, 0.5, 3, 2, 1, bias=bias)
    full.sum().backward()
    expected = bias.grad.clone()
    bias.grad = None
    for a, b in ((0, 4), (4, 8), (8, 11)):
        part = relu_dropout(z[:, a:b], ids, 0.5, 3, 2, 1, bias=bias[a:b], col0=a)
        assert torch.equal(part, full[:, a:b])
        part.sum().backward()
    assert torch.allclose(bias.grad, expected)
    assert 0 < int((full == 0).sum()) < full.numel()


def test_cli_refuses_grid_layout_off_the_grid():
    """``--grid-layout`` with a 1D algorithm: one line, exit 2 on every rank, before set-up."""
    from ..mpi import run_cli

    proc = run_cli(2, "train", "--csbm-n", "300", "--epochs", "1", "--quiet",
                   "--algorithm", "sparse1d", "--grid-layout")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.stderr.count("--grid-layout keeps the activations in SUMMA's blocks: it needs "
                             "--algorithm oblivious2d or oblivious3d, got sparse1d") == 1


def test_bench_records_the_block_layout(tmp_path):
    """``spmmgnn bench --mode train --grid-layout`` at P = 4 (2x2) next to the same run in the
    row layout: each record says its layout, the block layout's run converts less on every
    rank (only the features once and the logits), both train, and the report labels them
    apart."""
    import json

    from ..mpi import run_cli

    out = tmp_path / "runs.jsonl"
    common = ["bench", "--quiet", "--threads", "1", "-o", str(out), "--mode", "train",
              "--graph", "csbm:n=300,avg_degree=5", "--algorithm", "oblivious2d", "-f", "8",
              "--epochs", "2"]
    for extra in ([], ["--grid-layout"]):
        proc = run_cli(4, *common, *extra)
        assert proc.returncode == 0, proc.stderr[-3000:]
    recs = {r["layout"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert set(recs) == {"rows", "grid"} and recs["grid"]["grid_layout"] is True
    assert "grid_layout" not in recs["rows"] and recs["rows"]["grid"] == "2x2"
    for r in recs.values():
        assert "error" not in r and r["final"]["loss"] > 0
    rows, grid = (recs[k]["per_rank"]["bytes_sent_convert"] for k in ("rows", "grid"))
    assert all(g < r for g, r in zip(grid, rows, strict=True)), (grid, rows)
    from spmmgnn.benchmark.report import grid_key  # the report keeps them apart

    assert [grid_key(recs[k]) for k in ("rows", "grid")] == ["2x2", "2x2 grid-layout"]


@pytest.mark.parametrize("flags, words", [
    (["--algorithm", "sparse1d", "--grid-layout"],
     "--grid-layout keeps the activations in SUMMA's blocks: it needs --algorithm "
     "oblivious2d or oblivious3d, got sparse1d"),
    (["--algorithm", "oblivious2d", "--plexus-blocks", "2"],
     "--plexus-blocks trains in Plexus's blocks: it needs --algorithm plexus3d, got "
     "oblivious2d"),
    (["--algorithm", "oblivious2d", "--grid-layout", "--mode", "spmm", "train"],
     "are training layouts: give --mode train")])
def test_bench_refuses_a_layout_train_refuses(tmp_path, flags, words):
    """A block layout the sweep cannot run: one line, exit 2 on every rank, nothing run."""
    from ..mpi import one_line_error, run_cli

    out = tmp_path / "runs.jsonl"
    proc = run_cli(2, "bench", "--quiet", "-o", str(out), "--graph", "csbm:n=300",
                   "--mode", "train", *flags)
    one_line_error(proc, words)
    assert not out.exists()


def test_model_prints_the_kept_layouts(tmp_path):
    """``spmmgnn model``'s time model adds the kept layouts' training step for oblivious2d and
    plexus3d (none for sparse1d) next to the row layout's epoch; its bytes are
    ``benchmark.kept_volumes``' (the function the training tests hold against comm_stats())
    for a GCN f -> f -> f without the cache."""
    import json

    from spmmgnn.benchmark.graphs import make_graph
    from spmmgnn.benchmark.kept_volumes import kept_step
    from spmmgnn.benchmark.volumes import Layout

    from ..mpi import run_cli

    out = tmp_path / "model.json"
    proc = run_cli(1, "model", "random:n=300,avg_degree=4", "--P", "4", "8", "--algorithm",
                   "sparse1d", "oblivious2d", "plexus3d", "--alpha", "1e-6", "--beta", "1e-9",
                   "--rate", "1e9", "-f", "16", "--json", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "kept layouts" in proc.stdout
    kept = json.loads(out.read_text())["kept"]
    assert [(r["P"], r["algorithm"]) for r in kept] == [
        (4, "oblivious2d kept"), (4, "plexus3d kept"), (8, "oblivious2d kept"),
        (8, "plexus3d kept")]
    A = make_graph("random:n=300,avg_degree=4").adj
    symmetric = (A != A.T).nnz == 0
    for r in kept:
        algo = r["algorithm"].split()[0]
        shape = tuple(int(s) for s in r["grid"].split("x"))
        step = kept_step(algo, Layout.build(A, None, r["P"]), r["P"], [16, 16, 16], 4,
                         symmetric, False, shape)
        assert r["max_bytes_sent"] == step.algorithm.max() > 0
        assert r["max_convert_bytes"] == step.convert.max()
        assert 0 < r["epoch_seconds"] and r["row_step_seconds"] > 0 and r["spmms"] == 3


def test_grid_script_models_a_lean_graph(tmp_path):
    """``python -m bench.grid --only model --quick --graph-npy STEM --out DIR`` on lean R-MAT
    files (int64 indptr, int32 indices, symmetric, no values): the model section names the graph
    and its n, GCN-normalized (a self loop on every vertex), prices the three kept layouts
    next to the same SpMMs in the row layout, records its peak memory and writes only
    into DIR."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    import scipy.sparse as sp

    from spmmgnn.data.generators import rmat

    A = sp.csr_array(rmat(10, 4, seed=2))
    A.setdiag(0)
    A.eliminate_zeros()
    A.sort_indices()
    stem = tmp_path / "lean"
    np.save(f"{stem}.indptr.npy", A.indptr.astype(np.int64))
    np.save(f"{stem}.indices.npy", A.indices.astype(np.int32))
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "bench.grid", "--only", "model", "--quick",
                           "--graph-npy", str(stem), "--out", str(out)],
                          cwd=Path(__file__).resolve().parents[2], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == ["grid-quick.json", "grid-quick.md"]
    md = json.loads((out / "grid-quick.json").read_text())["model"]
    assert md["n"] == 1024 and md["nnz"] == A.nnz + 1024 and "lean" in md["graph"]
    assert md["peak_rss_bytes"] > 0
    kept = [r for r in md["times"] if r["algorithm"].endswith(" kept")]
    assert sorted({r["algorithm"] for r in kept}) == ["oblivious2d kept", "oblivious3d kept",
                                                     "plexus3d kept"]
    assert all(r["row_step_seconds"] > 0 and r["spmms"] == 3 for r in kept)
    assert "plexus3d kept" in (out / "grid-quick.md").read_text()
