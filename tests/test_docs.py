"""The documentation stays true: its marked Python examples run under ``mpiexec`` (and check
their results against scipy themselves), the MkDocs site builds with ``--strict``, and the
README stays short.

A fenced ``python`` block is run when the line before it (blank lines allowed in between) is a
marker such as ``<!-- test: ranks=1,2 -->``: the block is written to a file and run with this
environment's ``mpiexec -n P python FILE`` at each listed P (``tests/mpi.py``); it passes when
every rank exits 0. HTML comments are invisible in the rendered pages.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .mpi import run_mpi

ROOT = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"^<!--\s*test:\s*ranks=(\d+(?:\s*,\s*\d+)*)\s*-->\s*$")
FENCE = re.compile(r"^(`{3,})python\s*$")
README_MAX_LINES = 250
# marked blocks per file: losing a marker (or a whole example) fails test_marked_block_count
EXPECTED = {"README.md": 4, "docs/spmm-api.md": 3, "docs/partitioning.md": 1,
            "docs/training.md": 2}


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def marked_blocks(path: Path) -> list[tuple[int, tuple[int, ...], str]]:
    """(line number, rank counts, code) of every marked ``python`` block of ``path``."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found, ranks, i = [], None, 0
    while i < len(lines):
        line = lines[i]
        marker = MARKER.match(line.strip())
        fence = FENCE.match(line.strip())
        if marker:
            ranks = tuple(int(r) for r in marker.group(1).split(","))
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


def all_blocks() -> list[tuple[str, int, int, str]]:
    """(file, line, P, code) for every marked block and each of its rank counts; a block
    repeated verbatim (the README's examples are also on the docs pages) runs once per P."""
    cases, seen = [], set()
    for path in doc_files():
        for line, ranks, code in marked_blocks(path):
            for n in ranks:
                if (code, n) not in seen:
                    seen.add((code, n))
                    cases.append((str(path.relative_to(ROOT)), line, n, code))
    return cases


CASES = all_blocks()


def test_marked_block_count():
    counts = {}
    for path in doc_files():
        counts[str(path.relative_to(ROOT))] = len(marked_blocks(path))
    for name, expected in EXPECTED.items():
        assert counts.get(name, 0) >= expected, (name, counts)
    assert sum(counts.values()) >= sum(EXPECTED.values()), counts


@pytest.mark.parametrize(("name", "line", "n", "code"), CASES,
                         ids=[f"{name}:{line}-P{n}" for name, line, n, _ in CASES])
def test_snippet_runs(tmp_path, name, line, n, code):
    script = tmp_path / f"{Path(name).stem}_{line}.py"
    script.write_text(code)
    proc = run_mpi(n, str(script), timeout=300, check=False)
    assert proc.returncode == 0, (f"{name}:{line} at P={n} exited {proc.returncode}\n"
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
