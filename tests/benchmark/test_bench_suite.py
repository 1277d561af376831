"""``bench/`` is one package on the library's benchmark machinery: no program edits
``sys.path``, every result in ``bench/results`` is either written by a module from its stored
JSON (and is what the current code writes from it) or kept as documented, and the shared
launcher, table writer and rates behave."""

from __future__ import annotations

import ast
import importlib
import json
import shutil
import sys
from pathlib import Path

import pytest

from spmmgnn.benchmark.harness import LaunchError, library_from, mpiexec, run
from spmmgnn.benchmark.tables import md_table, regenerate

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"


def _path_edits(text: str) -> list[str]:
    """Every use of ``sys.path`` (or ``site.addsitedir``) in a module's source."""
    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and (
                (node.value.id, node.attr) in (("sys", "path"), ("site", "addsitedir"))):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
        if isinstance(node, ast.ImportFrom) and node.module == "sys" and any(
                a.name == "path" for a in node.names):
            found.append(f"line {node.lineno}: from sys import path")
    return found


def test_no_file_under_bench_edits_sys_path():
    """The programs import the library and each other as packages (``python -m bench.X``
    from the repository root); none reaches into ``sys.path``."""
    files = sorted(BENCH.rglob("*.py"))
    assert len(files) > 20
    bad = {str(p.relative_to(ROOT)): e for p in files if (e := _path_edits(p.read_text()))}
    assert not bad, bad
    # the check sees an edit, whichever way it is written
    assert _path_edits("import sys\nsys.path.insert(0, 'x')\n")
    assert _path_edits("import sys\nsys.path[:0] = ['x']\n")
    assert _path_edits("from sys import path\npath.append('x')\n")
    assert not _path_edits("import sys\nprint(sys.argv)\n")


def test_every_module_of_the_package_imports():
    """Each program imports as ``bench.<name>`` (no leftover script-relative import)."""
    names = sorted(p.stem for p in BENCH.glob("*.py") if p.stem != "__init__")
    for name in names:
        if name == "recipes":   # an MPI program: it starts its workloads' communicator
            continue
        importlib.import_module(f"bench.{name}")


def test_every_result_is_rendered_or_documented():
    from bench.tables import DOCUMENTED, RESULTS_BY_STEM

    stems = {p.stem for p in (BENCH / "results").glob("*.md")}
    assert not set(RESULTS_BY_STEM) & set(DOCUMENTED)
    assert not stems - set(RESULTS_BY_STEM) - set(DOCUMENTED)   # each one or the other
    assert set(DOCUMENTED) <= stems
    for r in RESULTS_BY_STEM.values():   # each names a module that renders
        assert callable(r.function("render")), r


def test_the_stored_results_are_what_their_json_renders_to():
    """``python -m bench.tables --check``: every result whose JSON is stored (the tables the
    README and docs cite among them, and the kernels' plots by the signature of what they
    draw) and the published sweep's summary are what the current code writes from the
    stored JSON (the sweep's plots: ``test_plots``)."""
    from bench.tables import SWEEP, differences, stored, sweep_summary

    results = stored()
    assert {"kernel-choice", "scale", "partition_real", "send_balance_real", "readme-timings",
            "kernels-rmat"} <= {r.stem for r in results}
    assert differences(results, sweep=None) == []
    assert (SWEEP / "report" / "summary.md").read_text() == sweep_summary()


def test_the_table_writer_sees_a_changed_table_and_plot(tmp_path):
    """The check can fail: a table edited by hand, and a plot drawn from other data."""
    from bench.tables import RESULTS_BY_STEM, differences, write

    for name in ("scale", "kernels-rmat"):
        for ext in ("json", "md", "png"):
            if (BENCH / "results" / f"{name}.{ext}").exists():
                shutil.copy(BENCH / "results" / f"{name}.{ext}", tmp_path)
    results = [RESULTS_BY_STEM["scale"], RESULTS_BY_STEM["kernels-rmat"]]
    assert differences(results, tmp_path, sweep=None) == []
    md = tmp_path / "scale.md"
    md.write_text(md.read_text().replace("| P | largest rank", "| P | biggest rank"))
    data = json.loads((tmp_path / "kernels-rmat.json").read_text())
    data["results"][0]["seconds"]["torch"] *= 3
    (tmp_path / "kernels-rmat.json").write_text(json.dumps(data))
    (tmp_path / "kernels-rmat.md").write_text(
        importlib.import_module("bench.kernels").render(data))
    assert differences(results, tmp_path, sweep=None) == [
        f"{md}: not what its JSON renders to",
        f"{tmp_path / 'kernels-rmat.png'}: not what the current code draws from its JSON"]
    write(results, tmp_path, sweep=None)
    assert differences(results, tmp_path, sweep=None) == []


def test_md_table_draws_the_tables_of_the_results():
    assert md_table(["a", "b"], [[1, "x"], ["", 2.5]], "lr") == [
        "| a | b |", "|---|---:|", "| 1 | x |", "| | 2.5 |"]
    assert md_table(["a", "b"], [], spaced=True) == ["| a | b |", "| --- | --- |"]
    with pytest.raises(ValueError, match="align 'l' has 1 columns, the header 2"):
        md_table(["a", "b"], [], "l")


def test_regenerate_writes_or_checks_a_result(tmp_path):
    (tmp_path / "r.json").write_text(json.dumps({"x": 3}))
    render = lambda d: f"x = {d['x']}\n"  # noqa: E731
    assert not regenerate(tmp_path / "r", render, check=True)   # no Markdown yet
    assert regenerate(tmp_path / "r", render)
    assert (tmp_path / "r.md").read_text() == "x = 3\n"
    assert regenerate(tmp_path / "r", render, check=True)


def test_a_failed_child_names_its_command_and_stderr(tmp_path):
    cmd = [sys.executable, "-c", "import sys; sys.stderr.write('no such graph'); sys.exit(3)"]
    with pytest.raises(LaunchError, match=r"(?s)-c .* exited 3:\nno such graph"):
        run(cmd)
    assert run(cmd, check=False).returncode == 3
    with pytest.raises(LaunchError, match="did not finish in 1 s"):
        run([sys.executable, "-c", "import time; time.sleep(30)"], timeout=1)
    assert Path(mpiexec()).parent == Path(sys.executable).parent   # this environment's


def test_a_baseline_tree_supplies_only_spmmgnn(tmp_path):
    """``library_from``: a child started in the link folder imports ``spmmgnn`` from the
    other tree and ``bench`` from this checkout (the A/B of ``bench.partition --baseline``)."""
    other = tmp_path / "other"
    (other / "spmmgnn").mkdir(parents=True)
    (other / "spmmgnn" / "__init__.py").write_text("WHO = 'the baseline'\n")
    folder = tmp_path / "links"
    folder.mkdir()
    code = ("import spmmgnn, bench; print(spmmgnn.WHO); print(bench.ROOT)")
    out = run([sys.executable, "-c", code], env=library_from(other, folder, ROOT),
              cwd=folder).stdout.split()
    assert out == ["the", "baseline", str(ROOT)]


def test_the_rate_probe_measures_this_machine():
    """Small calls of the probes the floors use: positive, finite rates."""
    import math

    from spmmgnn.benchmark.rates import copy_bandwidth, gemm_rates

    rates = [copy_bandwidth(mbytes=4), copy_bandwidth(threads=1, mbytes=4),
             *gemm_rates(64, 1, repeat=2).values()]
    assert len(rates) == 4 and all(math.isfinite(r) and r > 0 for r in rates), rates
