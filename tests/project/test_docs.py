"""The documentation stays true: its marked Python examples run under ``mpiexec`` (and check
their results against scipy themselves), the MkDocs site builds with ``--strict``, and the
README stays short.

A fenced ``python`` block is run when the line before it (blank lines allowed in between) is a
marker such as ``<!-- test: ranks=1,2 -->``: the block is written to a file and run with this
environment's ``mpiexec -n P python FILE`` at each listed P (``tests/mpi.py``); it passes when
every rank exits 0. ``<!-- test: ranks=1,4 c=1,2 -->`` also gives each run a replication
c, passed as the script's argument (``mpiexec -n 4 python FILE 2``), which the block reads
(``c = int(sys.argv[1]) if len(sys.argv) > 1 else 1``) to build a P/c x c grid: every block
that reduces over rows runs on a 1.5D grid too (and on no P = 2 grid: the P = 4 run has two
block rows as well, and the 1D product is every other test's). HTML comments are invisible in
the rendered pages.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ..mpi import run_mpi

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"^<!--\s*test:\s*ranks=(\d+(?:\s*,\s*\d+)*)"
                    r"(?:\s+c=(\d+(?:\s*,\s*\d+)*))?\s*-->\s*$")
FENCE = re.compile(r"^(`{3,})python\s*$")
README_MAX_LINES = 250
# marked blocks per file: losing a marker (or a whole example) fails test_marked_block_count
EXPECTED = {"README.md": 4, "docs/spmm-api.md": 3, "docs/partitioning.md": 1,
            "docs/training.md": 2, "docs/research-recipes.md": 5, "docs/gpu.md": 1}
# blocks that must also run on a 1.5D grid (P = 4, c = 2): every one that reduces over rows
EXPECTED_REPLICATED = {"README.md": 1, "docs/training.md": 2, "docs/research-recipes.md": 5}


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def marked_blocks(path: Path) -> list[tuple[int, tuple[tuple[int, int | None], ...], str]]:
    """(line number, (P, c or None) runs, code) of every marked ``python`` block of
    ``path``."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found, ranks, i = [], None, 0
    while i < len(lines):
        line = lines[i]
        marker = MARKER.match(line.strip())
        fence = FENCE.match(line.strip())
        if marker:
            ranks = tuple(int(r) for r in marker.group(1).split(","))
            reps = (tuple(int(c) for c in marker.group(2).split(",")) if marker.group(2)
                    else (None,) * len(ranks))
            assert len(reps) == len(ranks), f"{path}:{i + 1}: one c per rank count"
            ranks = tuple(zip(ranks, reps, strict=True))
        elif fence and ranks is not None:
            close = fence.group(1)
            end = i + 1
            while end < len(lines) and lines[end].strip() != close:
                end += 1
            assert end < len(lines), f"{path}:{i + 1}: unclosed code block"
            found.append((i + 1, ranks, "\n".join(lines[i + 1:end]) + "\n"))
            ranks, i = None, end
        elif line.strip():
            ranks = None  # a marker applies to the block right after it only
        i += 1
    return found


def all_blocks() -> list[tuple[str, int, int, int | None, str]]:
    """(file, line, P, c, code) for every marked block and each of its runs; a block
    repeated verbatim (the README's examples are also on the docs pages) runs once per
    (P, c)."""
    cases, seen = [], set()
    for path in doc_files():
        for line, runs, code in marked_blocks(path):
            for n, c in runs:
                if (code, n, c) not in seen:
                    seen.add((code, n, c))
                    cases.append((str(path.relative_to(ROOT)), line, n, c, code))
    return cases


CASES = all_blocks()


def test_marked_block_count():
    counts = {}
    for path in doc_files():
        counts[str(path.relative_to(ROOT))] = len(marked_blocks(path))
    for name, expected in EXPECTED.items():
        assert counts.get(name, 0) >= expected, (name, counts)
    assert sum(counts.values()) >= sum(EXPECTED.values()), counts
    replicated = {str(path.relative_to(ROOT)): sum((4, 2) in runs
                                                   for _, runs, _ in marked_blocks(path))
                  for path in doc_files()}
    for name, expected in EXPECTED_REPLICATED.items():
        assert replicated.get(name, 0) >= expected, (name, replicated)


@pytest.mark.parametrize(("name", "line", "n", "c", "code"), CASES,
                         ids=[f"{name}:{line}-P{n}" + (f"c{c}" if c else "")
                              for name, line, n, c, _ in CASES])
def test_snippet_runs(tmp_path, name, line, n, c, code):
    script = tmp_path / f"{Path(name).stem}_{line}.py"
    script.write_text(code)
    args = () if c is None else (str(c),)
    proc = run_mpi(n, str(script), *args, timeout=300, check=False)
    assert proc.returncode == 0, (f"{name}:{line} at P={n} c={c} exited {proc.returncode}\n"
                                  f"--- stdout\n{proc.stdout[-3000:]}\n"
                                  f"--- stderr\n{proc.stderr[-5000:]}")


def test_mkdocs_build_strict(tmp_path):
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict",
                           "-f", str(ROOT / "mkdocs.yml"), "-d", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    cli = (tmp_path / "site" / "cli" / "index.html").read_text(encoding="utf-8")
    assert "<!-- cli-reference -->" not in cli  # the hook replaced its placeholder
    for command in ("train", "partition", "bench", "datasets convert"):
        assert f"spmmgnn {command}" in cli, command


def test_readme_is_short():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, len(lines)


def test_readme_keeps_the_ci_commands():
    """.ci/run runs the README's two commands; the README must show them verbatim."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    commands = [ln.strip() for ln in ci if ln.strip().startswith(("python3 -m venv",
                                                                   ".venv/bin/python -m"))]
    assert len(commands) == 2, commands
    for command in commands:
        assert command in readme, command


def test_named_result_files_exist():
    """Every ``bench/results/...`` file the pages name exists (the numbers live there)."""
    missing = []
    for path in doc_files():
        text = path.read_text(encoding="utf-8")
        for name in set(re.findall(r"bench/results/[\w./{},-]*[\w}]", text)):
            if "{" not in name and not (ROOT / name).exists():
                missing.append(f"{path.relative_to(ROOT)}: {name}")
    assert not missing, missing


def test_named_benchmark_programs_exist():
    """Every benchmark program the pages name (``python -m bench.X``, ``bench/X.py``) is a
    module of the ``bench`` package, or a retired study whose result says where it went
    (``git show COMMIT:bench/X.py``)."""
    retired = {m for p in (ROOT / "bench" / "results").glob("*.md")
               for m in re.findall(r"git show \w+:bench/(\w+)\.py", p.read_text())}
    assert {"agreement", "threads_load"} <= retired
    missing = []
    for path in doc_files():
        text = path.read_text(encoding="utf-8")
        names = set(re.findall(r"python -m bench\.(\w+)", text))
        names |= set(re.findall(r"(?<![\w/.])bench/(\w+)\.py", text)) - retired
        missing += [f"{path.relative_to(ROOT)}: bench.{n}" for n in sorted(names)
                    if not (ROOT / "bench" / f"{n}.py").exists()]
    assert not missing, missing
