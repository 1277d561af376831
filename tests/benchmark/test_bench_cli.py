"""Benchmarks as a product: the volume model against measured bytes, the sweep command
(append-only results, restart skips finished runs and retries failed ones), the report and
the scaling model."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse.csgraph import maximum_bipartite_matching

from spmmgnn.benchmark.volumes import Layout, predict

from ..mpi import run_cli, run_mpi_json


def _matrix(case: dict) -> sp.csr_array:
    n = case["n"]
    return sp.csr_array((np.ones(len(case["rows"])), (case["rows"], case["cols"])), shape=(n, n))


@pytest.mark.parametrize("P", [2, 3, 4])
def test_volume_model_equals_comm_stats(tmp_path, P):
    """Every registered algorithm, every c and 2D/3D grid shape, codecs and dtypes: the bytes
    predicted from the matrix and partition alone equal what comm_stats() counted, rank by
    rank."""
    got = run_mpi_json(P, "bench_volumes.py", tmp_path)
    assert {"oblivious1d", "sparse1d", "prepost1d", "oblivious15d",
            "sparse15d"} <= set(got["algorithms"])
    seen = set()
    for run in got["runs"]:
        case = got["cases"][run["case"]]
        k = P // run["c"]
        layout = Layout.build(_matrix(case), case["parts"], k)
        v = predict(run["algorithm"], layout, P, run["c"], run["f"], run["itemsize"],
                    run["codec"], shape=run["shape"])
        for key, pred in (("bytes_sent", v.sent), ("bytes_received", v.received),
                          ("bytes_sent_t", v.sent_t), ("bytes_received_t", v.received_t),
                          ("allreduce_bytes", v.allreduce), ("allreduce_bytes_t", v.allreduce)):
            measured = [r[key] for r in run["ranks"]]
            assert pred.tolist() == measured, (run["case"], run["algorithm"], run["c"],
                                               run["shape"], run["codec"], key)
        seen.add((run["algorithm"], run["c"]))
    assert ("sparse15d", P) in seen and ("prepost1d", 1) in seen
    assert {"sparse2d", "oblivious2d", "sparse3d", "oblivious3d"} <= {a for a, _ in seen}


def test_cover_volume_is_pairwise_matching_size():
    """König: the cover of each (receiver, sender) block pair has the size of a maximum
    matching of that pair's cut, found here pair by pair with scipy."""
    rng = np.random.default_rng(3)
    n, k = 60, 4
    A = sp.random(n, n, density=0.08, random_state=5, format="csr")
    A = sp.csr_array(A + sp.csr_array((np.ones(n), (np.zeros(n, int), np.arange(n))),
                                      shape=(n, n)))
    parts = rng.integers(0, k, n)
    C = Layout.build(A, parts, k).cover_volume()
    for i in range(k):
        for q in range(k):
            if i == q:
                assert C[i, q] == 0
                continue
            sub = sp.csr_array(A[np.flatnonzero(parts == i)][:, np.flatnonzero(parts == q)])
            sub.data[:] = 1
            m = maximum_bipartite_matching(sub, perm_type="column") if sub.nnz else []
            assert C[i, q] == int(np.sum(np.asarray(m) >= 0))


def _lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_bench_appends_and_restart_runs_nothing_twice(tmp_path):
    """Flags, then a TOML file that repeats those runs and adds two: only the new ones run,
    earlier lines stay byte for byte; a third identical call runs only the failed one."""
    out = tmp_path / "results.jsonl"
    flags = ["bench", "--graph", "random:n=300,avg_degree=6", "--algorithm", "sparse1d",
             "oblivious15d", "--replication", "1", "2", "-f", "4", "--repeat", "1", "-o",
             str(out)]
    proc = run_cli(2, *flags)
    assert proc.returncode == 0, proc.stderr
    first = out.read_text()
    recs = _lines(out)
    # sparse1d c=1, oblivious15d c=1 and c=2 (sparse1d has no c=2)
    assert sorted((r["algorithm"], r["c"]) for r in recs) == [
        ("oblivious15d", 1), ("oblivious15d", 2), ("sparse1d", 1)]
    for r in recs:
        assert r["P"] == 2 and r["version"] and r["machine"]["cores"] >= 1
        assert r["max_rel_error"] < 1e-5 and set(r["breakdown"]) >= {"local", "exchange"}
        # each rank's kernel choices: a tiny product takes the cache model's pick
        assert len(r["kernels"]) == 2 and all(
            k.startswith("A x unrolled") and k.endswith("(rule)") for q in r["kernels"] for k in q)
    # contiguous halves of 300 rows, f=4 float32: the oblivious root sends its 150 rows once
    obl = next(r for r in recs if r["algorithm"] == "oblivious15d" and r["c"] == 1)
    assert obl["per_rank"]["bytes_sent"] == [150 * 4 * 4] * 2
    toml = tmp_path / "sweep.toml"
    toml.write_text('[sweep]\ngraphs = ["random:n=300,avg_degree=6", "csbm:n=400,avg_degree=6"]\n'
                    'modes = ["spmm", "train"]\nalgorithms = ["sparse1d", "oblivious15d"]\n'
                    'replication = [1, 2]\nfeatures = [4]\nrepeat = 1\nepochs = 3\n')
    proc = run_cli(2, "bench", "--config", str(toml), "--algorithm", "sparse1d",
                   "--replication", "1", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert text.startswith(first)
    new = _lines(out)[len(recs):]
    # random x train fails (no features), recorded as such; csbm spmm and train are new
    assert sorted((r["graph"].split(":")[0], r["mode"]) for r in new) == [
        ("csbm", "spmm"), ("csbm", "train"), ("random", "train")]
    trained = next(r for r in new if r["mode"] == "train" and "error" not in r)
    assert 0.0 <= trained["accuracy"] <= 1.0 and trained["epochs_run"] == 3
    # the GCN graph is symmetric: its backward runs A y, and the symmetry probe's A^T
    # kernels (and transposed copies) are gone before training
    assert all(any(k.startswith("A x") for k in q) and not any(k.startswith("A^T x")
                                                                for k in q)
               for q in trained["kernels"])
    assert "features" in next(r for r in new if "error" in r)["error"]
    # a third call runs only the failed run again, and appends its new record
    proc = run_cli(2, "bench", "--config", str(toml), "--algorithm", "sparse1d",
                   "--replication", "1", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "1 failed run(s)" in proc.stdout and "1 run(s) recorded (1 failed)" in proc.stdout
    third = out.read_text()
    assert third.startswith(text)
    (retry,) = _lines(out)[len(recs) + len(new):]
    failed = next(r for r in new if "error" in r)
    assert retry["run_id"] == failed["run_id"] and "features" in retry["error"]
    ok = [r["run_id"] for r in _lines(out) if "error" not in r]
    assert len(ok) == len(set(ok))


def _fixture_records() -> list[dict]:
    recs = [dict(kind="network", P=2, alpha=2e-6, beta=1e-10, run_id="network-1",
                 machine=dict(host="h"), all_to_all=dict(alpha=3e-6, beta=2e-10))]
    for P in (1, 2, 4):
        for algo, c in (("oblivious1d", 1), ("sparse1d", 1), ("sparse15d", 2),
                        ("oblivious15d", 2)):
            if c > P:
                continue
            for part in ("none", "metis-vol"):
                for codec in (("none", "int2") if algo == "sparse1d" else ("none",)):
                    for mode in ("spmm", "train"):
                        sent = [1000 * (q + 1) // (2 if codec == "int2" else 1)
                                for q in range(P)]
                        r = dict(mode=mode, graph="random:n=100", algorithm=algo, P=P, c=c,
                                 partitioner=part, codec=codec, f=8, seed=0, n=100, nnz=800,
                                 seconds=1e-3 * P, run_id=f"{mode}{algo}{P}{c}{part}{codec}",
                                 breakdown=dict(local=4e-4, exchange=3e-4, allreduce=1e-4,
                                                codec=0.0, dense=1e-4, other=1e-4),
                                 per_rank=dict(bytes_sent=sent, allreduce_bytes=[64] * P))
                        r.update(accuracy=0.8) if mode == "train" else r.update(
                            max_rel_error=1e-7)
                        recs.append(r)
    recs.append(dict(mode="spmm", graph="random:n=100", algorithm="sparse1d", P=2, c=1,
                     partitioner="kahypar", codec="none", f=8, run_id="bad",
                     error="kahypar is not installed"))
    return recs


def test_quick_preset_runs_every_algorithm():
    from spmmgnn.algorithms import ALGORITHMS
    from spmmgnn.benchmark.sweep import SweepConfig, runs
    from spmmgnn.commands.bench import PRESETS

    planned = runs(SweepConfig(**PRESETS["quick"]).check(), P=2)
    assert {(r["algorithm"], r["mode"]) for r in planned} == {
        (a, m) for a in ALGORITHMS for m in ("spmm", "train")}


def test_report_writes_every_plot(tmp_path):
    res = tmp_path / "fixture.jsonl"
    res.write_text("".join(json.dumps(r) + "\n" for r in _fixture_records()) + '{"torn": ')
    proc = run_cli(1, "report", str(res), "-o", str(tmp_path / "rep"))
    assert proc.returncode == 0, proc.stderr
    for name in ("time_vs_P", "breakdown", "partitioners", "replication", "bytes_per_rank",
                 "codecs"):
        data = (tmp_path / "rep" / "random_n_100" / f"{name}.png").read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000, name
    md = (tmp_path / "rep" / "summary.md").read_text()
    assert "alpha = 2.00 us" in md and "kahypar is not installed" in md
    # P=4 sparse1d, no codec, metis-vol: sent 1000..4000 bytes: max 0.004 MB, avg 0.0025
    assert "| spmm | sparse1d | 4 | c=1 | metis-vol | none | 8 | 4.00 |" in md
    assert "| 0.004 | 0.003 | 1.60 |" in md
    assert "![codecs](random_n_100/codecs.png)" in md  # the links follow the folders


def test_model_prices_exact_volumes(tmp_path):
    """oblivious1d on 4 contiguous blocks of a 1000-vertex graph, f=8 float32: each stage
    broadcasts 250 rows (8000 B) over 4 ranks (2 tree levels): exchange = 4 (2 alpha +
    8000 beta); the root of a stage sends its block to 3 peers."""
    out = tmp_path / "model.json"
    png = tmp_path / "model.png"
    proc = run_cli(1, "model", "random:n=1000,avg_degree=5", "--P", "2", "4", "--c", "1",
                   "2", "--alpha", "1e-6", "--beta", "1e-9", "--rate", "1e9", "-f", "8",
                   "--json", str(out), "-o", str(png))
    assert proc.returncode == 0, proc.stderr
    got = json.loads(out.read_text())
    row = next(r for r in got["predictions"] if (r["P"], r["c"], r["algorithm"]) ==
               (4, 1, "oblivious1d"))
    assert row["max_bytes_sent"] == 3 * 250 * 8 * 4
    assert row["exchange"] == pytest.approx(4 * (2e-6 + 8000e-9))
    assert row["epoch_seconds"] == pytest.approx(4 * row["seconds"])
    assert {r["algorithm"] for r in got["predictions"]} >= {"sparse1d", "prepost1d",
                                                            "sparse15d"}
    assert any(s.startswith("P=4: best") for s in got["summary"])
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_model_prices_cd_r(tmp_path):
    """model --staleness 3: each forward call sends a third of sparse1d's rows (the bins
    partition every ghost set); the local backward sends nothing, so with alpha = 0 the mean
    exchange per SpMM is half the forward's and the delayed backward's equals the forward's;
    the local work is sparse1d's."""
    rows = {}
    for backward in ("local", "delayed"):
        out = tmp_path / f"{backward}.json"
        proc = run_cli(1, "model", "random:n=600,avg_degree=6", "--P", "2", "3", "--c", "1",
                       "--algorithm", "sparse1d", "--alpha", "1e-30", "--beta", "1e-9",
                       "--rate", "1e9", "--staleness", "3", "--delayed-backward", backward,
                       "--json", str(out))
        assert proc.returncode == 0, proc.stderr
        got = json.loads(out.read_text())
        rows[backward] = {(r["P"], r["algorithm"]): r for r in got["predictions"]}
        assert sum("sparse1d cd-3" in s for s in got["summary"]) == 2
    for P in (2, 3):
        exact, local, delayed = (rows["local"][P, "sparse1d"], rows["local"][P, "sparse1d cd-3"],
                                 rows["delayed"][P, "sparse1d cd-3"])
        assert local["avg_bytes_sent"] * 3 == pytest.approx(exact["avg_bytes_sent"])
        assert local["local"] == pytest.approx(exact["local"])
        assert delayed["exchange"] == pytest.approx(2 * local["exchange"])
        assert exact["exchange"] / 3 <= delayed["exchange"] <= exact["exchange"]
        assert local["epoch_seconds"] < exact["epoch_seconds"]
    proc = run_cli(1, "model", "random:n=60", "--P", "2", "--alpha", "1", "--beta", "1",
                   "--staleness", "-1")
    assert proc.returncode == 2 and "--staleness must be >= 0" in proc.stderr


def test_network_alpha_beta_feed_the_model(tmp_path):
    """bench --network appends a record with a fitted alpha and beta (one rank refuses);
    model --network takes them from the last such record."""
    out = tmp_path / "net.jsonl"
    proc = run_cli(1, "bench", "--network", "-o", str(out))
    assert proc.returncode == 2 and "at least 2 ranks" in proc.stderr
    proc = run_cli(2, "bench", "--network", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    (rec,) = _lines(out)
    assert rec["kind"] == "network" and rec["alpha"] >= 0 and rec["beta"] >= 0
    assert len(rec["ping_pong"]["seconds"]) == len(rec["ping_pong"]["sizes"]) >= 5
    js = tmp_path / "m.json"
    proc = run_cli(1, "model", "random:n=200,avg_degree=4", "--P", "2", "--c", "1",
                   "--network", str(out), "--rate", "1e9", "--json", str(js))
    assert proc.returncode == 0, proc.stderr
    got = json.loads(js.read_text())
    assert (got["alpha"], got["beta"]) == (rec["alpha"], rec["beta"])


def test_model_compare_uses_the_records_rate_and_bytes():
    """compare_runs: the local rate is the slowest rank's non-zeros x f / local seconds of the
    records at that width and thread count (400 x 8 / 1 ms = 3.2e6), bytes_equal is true for
    the model's own bytes and false for any other; a fixed rate ignores the records."""
    from spmmgnn.benchmark.compare import compare_runs, measured_rate
    from spmmgnn.benchmark.costs import Machine, build_layout, spmm_time

    A = sp.random_array((300, 300), density=0.02, format="csr", random_state=3)
    layout = build_layout(A, 2)
    sent = predict("sparse1d", layout, 2, 1, 8).sent.tolist()
    rec = dict(mode="spmm", graph="g", codec="none", partitioner="none", algorithm="sparse1d",
               P=2, c=1, f=8, seconds=0.01, threads_per_rank=1, breakdown=dict(local=1e-3),
               per_rank=dict(nnz=[100, 400], bytes_sent=sent))
    other = dict(rec, threads_per_rank=2, breakdown=dict(local=1.0),
                 per_rank=dict(rec["per_rank"], bytes_sent=[s + 1 for s in sent]))
    assert measured_rate([rec, other], 8) == pytest.approx(3.2e6)
    assert measured_rate([rec, other], 8, threads=2) == pytest.approx(3200.0)
    assert measured_rate([rec], 16) is None
    m = Machine(alpha=1e-6, beta=1e-9, rate=1e9)
    rows = compare_runs(A, [rec, other], "none", m)
    assert [r["bytes_equal"] for r in rows] == [True, False]
    vol = predict("sparse1d", layout, 2, 1, 8)
    want = spmm_time("sparse1d", layout, vol, 2, 1, 8, 4, Machine(1e-6, 1e-9, 3.2e6))
    assert rows[0]["predicted"] == pytest.approx(want["seconds"])
    fixed = compare_runs(A, [rec], "none", m, fixed_rate=True)
    assert fixed[0]["predicted"] == pytest.approx(
        spmm_time("sparse1d", layout, vol, 2, 1, 8, 4, m)["seconds"])
    assert fixed[0]["predicted"] < rows[0]["predicted"]


def test_recipes_table_runs_the_five_grids_and_rewrites_only_its_block():
    """``python -m bench.recipes_table --write docs/research-recipes.md`` (the recipes at
    P = 1, 2, 4 with c = 2, 2 x 2 and 2 x 1 x 2 with their ratios to scipy in the docs)."""
    from bench import recipes_table as mod

    root = Path(__file__).resolve().parents[2]
    assert [(P, g) for P, g, _ in mod.RUNS] == [(1, "1d"), (2, "1d"), (4, "c2"), (4, "2x2"),
                                                (4, "2x1x2")]
    page = (root / "docs" / "research-recipes.md").read_text()
    rows = ["| P = 1 | PageRank, 50 steps | 2.0 | 1.0 | 2.00 |"]
    quiet = mod.render(rows, "2026-11-26T05:41", "2026-11-26T05:47", (1.0, 1.5), "CMD")
    assert quiet.startswith("Measured on 2026-11-26 between 05:41 and 05:47 UTC with `CMD`")
    assert "load average 1.0 before, 1.5 after." in quiet and "loaded" not in quiet
    assert "**The machine was loaded**" in mod.render(rows, "2026-11-26T05:41",
                                                      "2026-11-26T05:47", (9.0, 1.0), "CMD")
    new = mod.replace_block(page, quiet)
    head, tail = page.split(mod.START)[0], page.split(mod.END)[1]
    assert new.startswith(head) and new.endswith(tail) and rows[0] in new
    assert mod.replace_block(new, quiet) == new
    with pytest.raises(SystemExit, match="needs one"):
        mod.replace_block("no markers", quiet)
