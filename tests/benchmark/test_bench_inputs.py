"""The inputs of ``spmmgnn model``, ``bench`` and ``report`` (trust issue, cases 6-8): nonsense
is refused with one line naming the file and line or the flag, torn lines are skipped with a
warning, failed runs run again on restart and the report counts the newest record of a run.
Results files are fuzzed: reading and reporting them raises a SpmmgnnError or nothing."""

from __future__ import annotations

import json
import math
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spmmgnn import SpmmgnnError
from spmmgnn.benchmark.records import done_ids, latest, read_records
from spmmgnn.benchmark.report import write_report

from ..mpi import one_line_error, run_cli

GRAPH = "random:n=200,avg_degree=4"
MODEL = ["model", GRAPH, "--rate", "1e9", "-f", "4"]


def _run(**kw) -> dict:
    """A valid successful spmm record at P = 2 (keyword arguments replace fields)."""
    rec = dict(mode="spmm", graph=GRAPH, algorithm="sparse1d", P=2, c=1, partitioner="none",
               codec="none", f=4, run_id="r1", seconds=1e-3,
               breakdown=dict(local=5e-4, exchange=5e-4), max_rel_error=1e-7,
               per_rank=dict(bytes_sent=[100, 200], bytes_received=[200, 100]))
    rec.update(kw)
    return rec


def _write(path, *lines) -> str:
    path.write_bytes(b"".join((ln if isinstance(ln, bytes) else
                               json.dumps(ln).encode()) + b"\n" for ln in lines))
    return str(path)


# ------------------------------------------------------------------ model flags (case 7)
@pytest.mark.parametrize("flags, words", [
    (["--P", "2", "--alpha", "-1", "--beta", "1e-9"], ["--alpha", "positive finite"]),
    (["--P", "2", "--alpha", "nan", "--beta", "1e-9"], ["--alpha", "nan"]),
    (["--P", "2", "--alpha", "1e-6", "--beta", "inf"], ["--beta", "inf"]),
    (["--P", "2", "--alpha", "1e-6", "--beta", "1e-9", "--rate", "0"], ["--rate"]),
    (["--P", "100000000", "--alpha", "1e-6", "--beta", "1e-9"], ["--P 100000000", "8192"]),
    (["--P", "3", "--c", "2", "--alpha", "1e-6", "--beta", "1e-9"], ["no (P, c) to model"]),
])
def test_model_refuses_nonsense(flags, words):
    one_line_error(run_cli(2, *MODEL, *flags), *words)


def test_model_network_record_without_beta(tmp_path):
    bad = dict(kind="network", P=2, alpha=1e-6, all_to_all=dict(alpha=1e-6, beta=1e-9))
    path = _write(tmp_path / "net.jsonl", bad)
    one_line_error(run_cli(1, *MODEL, "--P", "2", "--network", path),
                   f"{path}:1", "lacks ['beta']")


def test_model_json_into_a_file_fails_before_work(tmp_path):
    (tmp_path / "afile").write_text("x")
    proc = run_cli(1, *MODEL, "--P", "2", "--alpha", "1e-6", "--beta", "1e-9", "--json",
                   str(tmp_path / "afile" / "m.json"))
    one_line_error(proc, "cannot write --json")
    assert "alpha=" not in proc.stdout  # refused before the graph was even built


# ------------------------------------------------------------------ results files (case 6)
@pytest.mark.parametrize("line, words", [
    (_run(run_id=["x"]), ["run_id must be a str, got list"]),
    ({"run_id": ["x"]}, ["neither a sweep run"]),
    ({k: v for k, v in _run().items() if k != "breakdown"}, ["lacks ['breakdown']"]),
    (_run(seconds=float("nan")), ["seconds must be finite"]),
    (_run(per_rank=dict(bytes_sent=[1])), ["per_rank.bytes_sent", "P = 2"]),
    (_run(P=0), ["P must be positive"]),
    ([1, 2], ["not a JSON object but a list"]),
    (b"\xff\xfe{}", ["not UTF-8"]),
])
def test_report_refuses_a_malformed_record_naming_its_line(tmp_path, line, words):
    path = _write(tmp_path / "res.jsonl", _run(), line, _run(run_id="r3"))
    one_line_error(run_cli(2, "report", path, "-o", str(tmp_path / "rep")), f"{path}:2",
                   *words)
    assert not (tmp_path / "rep" / "summary.md").exists()


def test_bench_refuses_a_malformed_results_file_before_running(tmp_path):
    path = _write(tmp_path / "res.jsonl", _run(), _run(run_id=3))
    before = (tmp_path / "res.jsonl").read_bytes()
    proc = run_cli(2, "bench", "--graph", GRAPH, "--repeat", "1", "-o", path)
    one_line_error(proc, f"{path}:2", "run_id")
    assert (tmp_path / "res.jsonl").read_bytes() == before


def test_torn_lines_are_skipped_with_a_warning(tmp_path):
    path = _write(tmp_path / "res.jsonl", _run(), b'{"mode": "spmm", "gra', _run(run_id="r2"))
    with pytest.warns(UserWarning, match=r"skipped 1 line.*line 2"):
        assert [r["run_id"] for r in read_records(path)] == ["r1", "r2"]
    proc = run_cli(1, "report", path, "-o", str(tmp_path / "rep"))
    assert proc.returncode == 0, proc.stderr
    assert "warning: " in proc.stderr and "line 2" in proc.stderr


def test_bench_output_that_cannot_be_written_fails_first(tmp_path):
    (tmp_path / "afile").write_text("x")
    proc = run_cli(2, "bench", "--graph", GRAPH, "--repeat", "1", "-o",
                   str(tmp_path / "afile" / "r.jsonl"))
    one_line_error(proc, "cannot write results file")


@pytest.mark.parametrize("toml, words", [
    ("features = ['a']\n", ["features must hold ints", "'a'"]),
    ("repeat = 'x'\n", ["repeat must be a int"]),
    ("graphs = []\n", ["graphs must be a non-empty list"]),
    ("replication = [true]\n", ["replication must hold ints"]),
])
def test_sweep_file_types_are_checked(tmp_path, toml, words):
    cfg = tmp_path / "s.toml"
    cfg.write_text(toml)
    one_line_error(run_cli(1, "bench", "--config", str(cfg), "-o",
                           str(tmp_path / "r.jsonl")), *words)


# ------------------------------------------------------------------ retries (case 8)
def test_failed_runs_are_retried_and_the_newest_record_counts(tmp_path):
    path = _write(tmp_path / "res.jsonl",
                  _run(run_id="a", error="killed"), _run(run_id="a"),          # retried, ok
                  _run(run_id="b"), _run(run_id="b", error="out of memory"),   # newest failed
                  _run(run_id="c", error="kahypar is not installed"))
    done, failed = done_ids(path)
    assert done == {"a"} and failed == 2
    assert [(r["run_id"], "error" in r) for r in latest(read_records(path))] == [
        ("a", False), ("b", True), ("c", True)]
    write_report(read_records(path), tmp_path / "rep")
    md = (tmp_path / "rep" / "summary.md").read_text()
    assert "2 run(s) failed" in md and "killed" not in md and "out of memory" in md


# ------------------------------------------------------------------ fuzz
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**64) | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                 max_size=3),
    max_leaves=6)
_keys = st.sampled_from(sorted(_run()) + ["kind", "accuracy", "machine", "all_to_all"])


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.lists(st.tuples(_keys, _json), max_size=3), network=st.booleans(),
       junk=st.binary(max_size=12))
def test_fuzzed_results_files_raise_nothing_else(tmp_path, edits, network, junk):
    """A valid record with up to three fields replaced by arbitrary JSON (NaN and Inf
    included), and a line of random bytes: a SpmmgnnError, or a report."""
    rec = (dict(kind="network", P=2, alpha=1e-6, beta=1e-9,
                all_to_all=dict(alpha=1e-6, beta=1e-9)) if network else _run())
    for key, value in edits:
        rec[key] = value
    path = tmp_path / "fuzz.jsonl"
    path.write_bytes(json.dumps(rec).encode() + b"\n" + junk + b"\n")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the random-bytes line is usually torn JSON
            records = read_records(path)
            done_ids(path)
    except SpmmgnnError:
        return
    for r in records:
        for name in ("seconds", "alpha", "beta"):
            if name in r and not isinstance(r[name], (str, dict, list)) and r[name] is not None:
                assert math.isfinite(r[name])
    write_report(records, tmp_path / "rep")

