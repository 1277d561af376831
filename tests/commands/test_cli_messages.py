"""What the commands say to the probes of issue 46 (its third campaign and the newcomer), run
through the command line in this process (``cli.main``, one rank): a nonsense, huge or
non-finite flag, or an output onto an input, is one error line naming it and nothing is
written; help texts, a closed stdout, the notices before the long waits, and the numbers
the docs quote from the code. The same campaign's checks of the API are in
``tests/core/test_argument_checks.py``, of the results records in
``tests/benchmark/test_records.py``, of the progress line in
``tests/training/test_progress.py``, and what needs several ranks in
``tests/runtime/test_wire.py``, ``tests/algorithms/test_linalg_call_counts.py`` and
``tests/training/test_checkpoint_shapes.py``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

from spmmgnn import SpmmgnnError

OLD = b"old contents\n"


def _main(capsys, *argv: str) -> tuple[int, str, str]:
    from spmmgnn.cli import main

    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def _one_error(code: int, err: str, *words: str) -> None:
    assert code == 2 and err.count("error:") == 1 and "Traceback" not in err, err[-3000:]
    for w in words:
        assert w in err, (w, err[-3000:])


@pytest.fixture
def mtx(tmp_path) -> Path:
    A = sp.random(50, 50, density=0.1, random_state=0, format="csr")
    path = tmp_path / "g.mtx"
    scipy.io.mmwrite(path, A + A.T)
    return path


# ------------------------------------------------------------------ crash and data lost
def test_datasets_parts_beyond_the_vertices_is_one_error(capsys, tmp_path, mtx):
    out = tmp_path / "x.h5"
    code, _, err = _main(capsys, "datasets", "convert", mtx, "--parts", "1000000000",
                         "--out", out)
    _one_error(code, err, "1000000000 block rows for 50 vertices", "at most 50 (--parts)")
    assert not out.exists()


def test_convert_refuses_to_replace_its_input(capsys, tmp_path, mtx):
    before = mtx.read_bytes()
    link = tmp_path / "link.mtx"
    link.symlink_to(mtx)
    for out in (mtx, link):
        code, _, err = _main(capsys, "datasets", "convert", mtx, "--out", out)
        _one_error(code, err, f"--out {out} is the input file", "give another name")
    assert mtx.read_bytes() == before and link.is_symlink()


def test_bench_refuses_a_file_that_is_not_a_results_file(capsys, mtx):
    from spmmgnn.benchmark.records import read_records

    before = mtx.read_bytes()
    code, _, err = _main(capsys, "bench", "--graph", "random:n=100,avg_degree=4",
                         "--algorithm", "sparse1d", "--repeat", "1", "--quiet", "-o", mtx)
    _one_error(code, err, f"{mtx}:1: not a record of spmmgnn bench", "not a results file?")
    assert mtx.read_bytes() == before
    torn = mtx.parent / "torn.jsonl"  # a torn append (starts as a record does) is skipped
    torn.write_text('{"kind": "network", "P": 2, "alpha": 1e-6, "beta": 1e-9, '
                    '"all_to_all": {"alpha": 1e-6, "beta": 1e-9}}\n{"mode": "sp\n')
    with pytest.warns(UserWarning, match="skipped 1 line"):
        assert len(read_records(torn)) == 1


def test_report_onto_a_file_is_one_error(capsys, tmp_path):
    results = tmp_path / "r.jsonl"
    results.write_text(json.dumps(dict(kind="network", P=2, alpha=1e-6, beta=1e-9,
                                       all_to_all=dict(alpha=1e-6, beta=1e-9))) + "\n")
    target = tmp_path / "notes.txt"
    target.write_bytes(OLD)
    code, _, err = _main(capsys, "report", results, "-o", target)
    _one_error(code, err, f"report -o {target}: it is a file, not a folder")
    assert target.read_bytes() == OLD


# ------------------------------------------------------------------ silent wrong
def test_one_class_or_no_feature_column_is_refused(capsys, tmp_path):
    from spmmgnn.data.csbm import csbm
    from spmmgnn.data.graph import Graph

    code, out, err = _main(capsys, "train", "--csbm-n", "300", "--csbm-classes", "1",
                           "--epochs", "1", "--hidden", "8", "--quiet")
    _one_error(code, err, "the labels have one class: a classifier needs at least 2")
    assert "loss" not in out
    g = csbm(n=100, avg_degree=4, num_features=4, seed=1)
    empty = Graph(adj=g.adj, features=np.zeros((100, 0), np.float32), labels=g.labels,
                  masks=g.masks, num_classes=g.num_classes, name="g")
    with pytest.raises(SpmmgnnError, match=r"g: features have 0 columns \(shape \(100, 0\)\)"):
        empty.validate()
    two = Graph(adj=g.adj, features=g.features, labels=np.zeros((100, 2), np.int64), name="g")
    with pytest.raises(SpmmgnnError, match=r"labels must be one class id per vertex, shape "
                                           r"\(100,\), got \(100, 2\); one-hot"):
        two.validate()


MODEL = ["model", "random:n=200,avg_degree=4", "--alpha", "1e-6", "--beta", "1e-9",
         "--rate", "1e9"]


@pytest.mark.parametrize("argv, words", [
    ([*MODEL, "--grid", "3x3", "--P", "4"], ["--grid 3x3 has 9 ranks but no --P is 9"]),
    ([*MODEL, "--exchange", "node", "--P", "4"], ["--exchange price two tiers",
                                                  "give --ranks-per-node K"]),
    ([*MODEL, "--P", "4", "--ranks-per-node", str(10**23)],
     ["--ranks-per-node: must be an integer in [1, 2147483647]"]),
    (["train", "--threads=-3", "--csbm-n", "300"], ["--threads: must be an integer in [0,"]),
    (["spmm", "--ranks-per-node", str(2**63)], ["--ranks-per-node: must be an integer"]),
    (["bench", "--graph", "random:n=100,avg_degree=4", "--algorithm", "sparse1d",
      "--replication", "3", "-o", "r.jsonl"],
     ["the sweep has no run at P = 1 (replication [3]", "divisors of 1"]),
    (["bench", "--graph", "random:n=100,avg_degree=4", "--algorithm", "sparse2d",
      "--grid", "3x3", "-o", "r.jsonl"], ["the sweep has no run at P = 1", "grids 3x3"]),
    (["bench", "--graph", "random:n=100,avg_degree=4", "--partitioner", "garbage",
      "-o", "r.jsonl"], ["sweep: partitioners: unknown partitioning method 'garbage'"]),
])
def test_options_that_would_do_nothing_are_errors(capsys, tmp_path, monkeypatch, argv, words):
    monkeypatch.chdir(tmp_path)
    code, out, err = _main(capsys, *argv)
    _one_error(code, err, *words)
    assert not (tmp_path / "r.jsonl").exists()


# ------------------------------------------------------------------ readable lines
def test_help_texts(capsys):
    for argv, want, not_want in [
        (["partition", "--help"], "(default: 'default' 3x METIS-vol's time", "{DEFAULT_METHOD}"),
        (["model", "--help"], "at P ranks without launching them.", None),
        (["datasets", "csbm", "--help"], "average degree (default: 16.0)", None),
    ]:
        code, out, _ = _main(capsys, *argv)
        text = " ".join(out.split())
        assert code == 0 and want in text, text[:3000]
        assert not_want is None or not_want not in text
    code, out, err = _main(capsys, "train", "--bogus")
    assert code == 2 and err.startswith("usage: spmmgnn train ")
    assert "spmmgnn train: error: unrecognized arguments: --bogus" in err


def test_a_closed_stdout_ends_quietly():
    """``spmmgnn ... | head -0``: status 141 (SIGPIPE's), nothing on stderr."""
    proc = subprocess.Popen([sys.executable, "-m", "spmmgnn.cli", *MODEL, "--P", "4"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=dict(os.environ, SPMMGNN_THREADS="1"))
    proc.stdout.close()  # before the command prints anything
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141 and err == "", err[-3000:]


def test_algorithm_flags_it_does_not_take_are_refused_before_set_up(capsys):
    code, out, err = _main(capsys, "train", "--csbm-n", "300", "--algorithm", "oblivious1d",
                           "--codec", "int8", "--epochs", "1", "--quiet")
    _one_error(code, err, "--algorithm oblivious1d does not compress its exchange",
               "prepost1d, sparse15d, sparse1d, sparse2d")
    assert "codec_backward" not in err and "codec_seed" not in err and out == ""
    code, out, err = _main(capsys, "train", "--csbm-n", "300", "--algorithm", "sparse2d",
                           "--grid", "1x1", "--staleness", "2", "--epochs", "1", "--quiet")
    _one_error(code, err, "--staleness and --drop-remote need an algorithm whose remote rows "
                          "can be delayed (sparse1d), got --algorithm sparse2d")
    assert out == ""  # no header: refused before the data was set up


def test_bad_sweep_inputs_are_one_line(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bin.toml").write_bytes(b"graphs = 1\n\xd0\xff\x00\x01")
    code, _, err = _main(capsys, "bench", "--config", "bin.toml", "-o", "r.jsonl")
    _one_error(code, err, "bin.toml: not a TOML file: not UTF-8 text")
    code, _, err = _main(capsys, "bench", "--graph", "", "-o", "r.jsonl")
    _one_error(code, err, "sweep: graphs: an empty name")
    assert not (tmp_path / "r.jsonl").exists()


def test_report_names_the_plots_where_they_are(capsys, tmp_path):
    results = tmp_path / "r.jsonl"
    results.write_text(json.dumps(dict(kind="network", P=2, alpha=1e-6, beta=1e-9,
                                       all_to_all=dict(alpha=1e-6, beta=1e-9))) + "\n")
    code, out, err = _main(capsys, "report", results, "-o", tmp_path / "rep")
    assert code == 0, err
    names = out.split(": ", 2)[2].strip().split(", ")
    assert all((tmp_path / "rep" / n).is_file() for n in names), names
    assert any("/" in n and n.endswith(".png") for n in names), names


def test_open_mpis_launcher_with_the_mpich_wheel_says_what_to_run():
    """What Open MPI's ``mpiexec`` sets in each rank's environment; the MPICH of the wheel
    would crash in ``MPI_Init``, so the command stops before MPI starts."""
    env = dict(os.environ, OMPI_COMM_WORLD_SIZE="2", OMPI_COMM_WORLD_RANK="0")
    proc = subprocess.run([sys.executable, "-m", "spmmgnn.cli", "train", "--epochs", "1"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr[-3000:]
    (line,) = proc.stderr.splitlines()
    mpiexec = str(Path(sys.executable).parent / "mpiexec")
    assert "started by Open MPI's mpiexec" in line and f"{mpiexec} -n P spmmgnn" in line


# ------------------------------------------------------------------ the newcomer's docs
def test_the_quick_presets_run_count_in_the_docs_is_the_codes():
    import re

    from spmmgnn.benchmark.sweep import SweepConfig, runs
    from spmmgnn.commands.bench import PRESETS

    text = (Path(__file__).parents[2] / "docs" / "benchmarks.md").read_text()
    cfg = SweepConfig(**PRESETS["quick"]).check()
    said = re.search(r"is (\d+) runs at P = 2\s+and (\d+) at P = 1", text)
    assert said and (int(said[1]), int(said[2])) == (len(runs(cfg, 2)), len(runs(cfg, 1)))
    assert f"# {len(runs(cfg, 2))} runs at P = 2" in text


def test_a_first_run_says_it_compiles_the_kernels(capsys, tmp_path, monkeypatch):
    """An empty numba cache: one notice line before the wait (the error here comes before
    any kernel runs); with the kernels cached, none."""
    from spmmgnn.runtime import jit
    from spmmgnn.runtime.jit import kernels_cached

    monkeypatch.setitem(jit._notice, "shown", False)  # (once per process: an earlier test's)
    monkeypatch.chdir(tmp_path)
    argv = ["bench", "--graph", "random:n=100,avg_degree=4", "--algorithm", "sparse1d",
            "--replication", "3", "-o", "r.jsonl"]
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "cache"))
    if kernels_cached():
        pytest.skip("the kernels are cached beside the package (no NUMBA_CACHE_DIR)")
    code, _, err = _main(capsys, *argv)
    assert code == 2 and err.splitlines()[0] == (
        "spmmgnn bench: compiling the numba kernels (the first run in this environment: "
        "about 20-90 s; later runs load them from numba's cache)"), err
    here = Path(__import__("spmmgnn").__file__).parent / "local"  # the kernels' folder
    import hashlib

    sub = tmp_path / "cache" / f"local_{hashlib.sha1(str(here).encode()).hexdigest()}"
    sub.mkdir(parents=True, exist_ok=True)
    (sub / "kernels.gather_rows-1.py311.nbi").write_bytes(b"")
    assert kernels_cached()
    code, _, err = _main(capsys, *argv)
    assert code == 2 and "compiling" not in err


def test_datasets_two_level_partitioning_has_its_own_flag(capsys, tmp_path, mtx):
    out = tmp_path / "x.h5"
    for extra, words in [
        ([], "--partitioner twolevel:block partitions the nodes first: give --parts-per-node K"),
        (["--parts-per-node", "3"], "--parts-per-node 3 must be a positive divisor of --parts 4"),
    ]:
        code, _, err = _main(capsys, "datasets", "convert", mtx, "--parts", "4",
                             "--partitioner", "twolevel:block", *extra, "--out", out)
        _one_error(code, err, words)
        assert "parts_per_node" not in err
    code, _, err = _main(capsys, "datasets", "convert", mtx, "--parts", "4",
                         "--parts-per-node", "2", "--out", out)
    _one_error(code, err, "--parts-per-node applies to the twolevel:<method> partitioners")
    code, out_text, err = _main(capsys, "datasets", "convert", mtx, "--parts", "4",
                                "--partitioner", "twolevel:block", "--parts-per-node", "2",
                                "--out", out)
    assert code == 0 and "block rows=4 (twolevel:block)" in out_text, err


def test_model_memory_says_what_it_does_before_its_wait(capsys):
    code, out, err = _main(capsys, "model", "csbm:n=300", "--memory", "--P", "2", "--c", "1")
    assert code == 0, err
    assert err.splitlines()[0].startswith("spmmgnn model: building csbm:n=300 and its "
                                          "partitions")
    assert out.startswith("graph csbm:n=300")  # the table stays on stdout


@pytest.mark.parametrize("argv, words", [
    (["spmm", "--degree", "inf"], ["argument --degree: must be a finite number >= 0, got inf"]),
    (["spmm", "--degree", "nan"], ["argument --degree: must be a finite number >= 0, got nan"]),
    (["partition", "g.mtx", "-k", "2", "-o", "o.h5", "--epsilon", "inf"],
     ["epsilon must be a non-negative number, got inf"]),
    (["partition", "g.mtx", "-k", "2", "-o", "o.h5", "--volume-slack=-1e308"],
     ["volume_slack must be a non-negative number, got -1e+308"]),
    (["datasets", "csbm", "--out", "d.h5", "--degree", "nan"],
     ["argument --degree: must be a finite number >= 0, got nan"]),
    (["datasets", "csbm", "--out", "d.h5", "--homophily", "1e308"],
     ["argument --homophily: must be a finite number >= 0, at most 1"]),
    (["train", "--csbm-signal", "1e308"],
     ["argument --csbm-signal: must be a finite number >= 0, at most 1e+30, got 1e308"]),
    (["train", "--csbm-n", "300", "--weight-decay", "1e308"],
     ["--weight-decay in [0, 1e+30] (Adam's step must fit a float32)"]),
    ([*MODEL[:2], "--alpha", "1e308", "--beta", "1e-9", "--P", "2"],
     ["--alpha must be a positive finite number in (0, 1000], got 1e+308"]),
    ([*MODEL[:2], "--alpha", "1e-6", "--beta", "1e-9", "--rate", "1e-308", "--P", "2"],
     ["--rate must be a positive finite number in (0.001, 1e+30]"]),
    (["train", "--ranks-per-node", str(10**23)], ["--ranks-per-node: must be an integer in"]),
    (["bench", "--graph", "random:n=100,avg_degree=4", "--ranks-per-node", str(10**23), "-o",
      "r.jsonl"], ["--ranks-per-node: must be an integer in [1, 2147483647]"]),
])
def test_huge_or_non_finite_numbers_are_one_error(capsys, tmp_path, monkeypatch, mtx, argv,
                                                  words):
    """Issue 46: a huge, infinite or NaN float option is one line naming it (before: an
    OverflowError from ``int(inf)``, inf ms in the model's table, a run that overflows)."""
    monkeypatch.chdir(mtx.parent)
    code, out, err = _main(capsys, *argv)
    _one_error(code, err, *words)
    assert "loss" not in out and not (mtx.parent / "o.h5").exists()


def test_a_huge_epsilon_lifts_the_load_cap(capsys, tmp_path, mtx):
    """``--epsilon 1e308`` (before: OverflowError in ``load_cap``) means no load limit: the
    cap is the whole load, and the partition is written."""
    from spmmgnn.data.csbm import csbm
    from spmmgnn.partitioners import partition
    from spmmgnn.partitioners.model import load_cap

    loads = np.array([3, 1, 4, 1, 5])
    assert load_cap(loads, 2, 1e308) == load_cap(loads, 2, 1.0) == 14
    assert load_cap(loads, 2, 0.0) == 7
    p = partition(csbm(n=200, avg_degree=4, seed=1).adj, 4, "metis-vol", epsilon=1e308)
    assert p.sizes.sum() == 200
    for method in ("metis-vol", "twolevel:metis-vol"):
        out = tmp_path / f"{method[:3]}.h5"
        code, text, err = _main(capsys, "partition", mtx, "-k", "4", "-o", out, "--method",
                                method, "--epsilon", "1e308",
                                *(["--parts-per-node", "2"] if "two" in method else []))
        assert code == 0 and out.exists() and "Traceback" not in err, err[-3000:]
    with pytest.raises(SpmmgnnError, match="csbm: signal 1e\\+308 makes the float32 features"):
        csbm(n=100, signal=1e308)


def test_partition_two_level_has_its_own_flag(capsys, tmp_path, mtx):
    """``partition --method twolevel:...`` asks for --parts-per-node (before: no such flag,
    and the error named the internal ``parts_per_node``)."""
    out = tmp_path / "x.h5"
    base = ["partition", mtx, "-k", "4", "-o", out]
    for extra, words in [
        (["--method", "twolevel:metis-vol"],
         "--method twolevel:metis-vol partitions the nodes first: give --parts-per-node K "
         "(the block rows of one node, a divisor of -k 4)"),
        (["--method", "twolevel:metis-vol", "--parts-per-node", "3"],
         "--parts-per-node 3 must be a positive divisor of -k 4"),
        (["--method", "metis-vol", "--parts-per-node", "2"],
         "--parts-per-node applies to the twolevel:<method> partitioners only"),
        (["--method", "twolevel:metis-vol", "--parts-per-node", str(2**40)],
         "argument --parts-per-node: must be an integer in [1, 2147483647]"),
    ]:
        code, _, err = _main(capsys, *base, *extra)
        _one_error(code, err, words)
        assert "parts_per_node" not in err and not out.exists()
    code, text, err = _main(capsys, *base, "--method", "twolevel:metis-vol",
                            "--parts-per-node", "2", "--json", tmp_path / "m.json")
    assert code == 0, err[-3000:]
    report = json.loads((tmp_path / "m.json").read_text())
    assert report["method"] == "twolevel:metis-vol" and len(report["block_sizes"]) == 4


def test_model_two_level_has_its_own_flag(capsys):
    """``model --memory --partitioner twolevel:...`` takes --parts-per-node, a divisor of
    every P/c it models; the time model on two tiers keeps --ranks-per-node / c."""
    base = ["model", "csbm:n=300", "--memory", "--P", "2", "4", "--c", "1", "2",
            "--algorithm", "sparse1d", "sparse15d", "--partitioner", "twolevel:metis-vol"]
    code, _, err = _main(capsys, *base)
    _one_error(code, err, "partitions the nodes first: give --parts-per-node K (the block "
                          "rows of one node)")
    code, _, err = _main(capsys, *base, "--parts-per-node", "2")
    _one_error(code, err, "not at --P 2 --c 2: 1 block rows, --parts-per-node 2")
    assert "parts_per_node" not in err
    code, out, err = _main(capsys, *base[:3], "--P", "2", "4", "--c", "1", "--algorithm",
                           "sparse1d", "--partitioner", "twolevel:metis-vol",
                           "--parts-per-node", "2")
    assert code == 0 and "partitioner twolevel:metis-vol" in out, err[-3000:]
    code, out, err = _main(capsys, *MODEL, "--P", "4", "--algorithm", "sparse1d",
                           "--partitioner", "twolevel:metis-vol", "--ranks-per-node", "2")
    assert code == 0 and "4 ranks per node" not in out and "2 ranks per node" in out, err


def test_the_long_waits_say_what_runs_first(capsys, tmp_path):
    """Issue 46's silent waits: ``--method quality`` (tens of seconds) and ``datasets
    wordnet`` (16 s) print what runs and about how long before the wait (the kernel
    compilation and ``model --memory``: the tests above)."""
    from spmmgnn.data.csbm import csbm
    from spmmgnn.partitioners import partition

    lines: list[str] = []
    partition(csbm(n=200, avg_degree=4, seed=1).adj, 4, "quality", time_budget=0.2,
              progress=lines.append)
    assert lines[0].startswith("partition: estimate for quality k=4 (n=200"), lines
    assert " s (" in lines[0] and "MiB peak" in lines[0], lines
    code, _, err = _main(capsys, "datasets", "wordnet", "--out", tmp_path / "w.h5",
                         "--wordnet-dir", tmp_path / "none")
    assert code == 2 and err.splitlines()[0] == (
        "spmmgnn datasets: reading WordNet and computing its TF-IDF + SVD features "
        "(about 15 s)"), err
