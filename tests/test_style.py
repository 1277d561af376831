"""The code base stays ruff-clean (rules in pyproject.toml)."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_clean():
    ruff = Path(sys.executable).parent / "ruff"
    exe = str(ruff) if ruff.exists() else shutil.which("ruff")
    if exe is None:
        pytest.skip("ruff is not installed (pip install '.[test]')")
    proc = subprocess.run([exe, "check", str(ROOT)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _private_uses(path: Path) -> list[str]:
    """``x._name`` with x other than self/cls, and ``from m import _name``, in one file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))):
            found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
        if isinstance(node, ast.ImportFrom):
            found += [f"{path.name}:{node.lineno}: from {node.module} import {a.name}"
                      for a in node.names if a.name.startswith("_")]
    return found


def test_algorithms_use_no_private_names_of_others():
    """The algorithms (the delayed views included) are built from the operator's and the
    halo plan's public verbs only."""
    found = [u for p in sorted((ROOT / "spmmgnn" / "algorithms").glob("*.py"))
             for u in _private_uses(p)]
    assert not found, found
    # the check itself sees a private use
    probe = ROOT / "spmmgnn" / "algorithms" / "delayed.py"
    text = probe.read_text(encoding="utf-8").replace("op.check_local(", "op._check_local(", 1)
    assert any("_check_local" in u for u in _private_uses_of_text(text))


def _private_uses_of_text(text: str) -> list[str]:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "probe.py"
        p.write_text(text, encoding="utf-8")
        return _private_uses(p)
