"""The code base stays ruff-clean (rules in pyproject.toml)."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


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


# The layers of docs/architecture.md, bottom to top, and what each may import.
BASE = {"runtime": {"runtime"}}
BASE["local"] = BASE["runtime"] | {"local"}
BASE["backend"] = BASE["local"] | {"backend"}
BASE["exchange"] = BASE["backend"] | {"exchange"}
BASE["core"] = BASE["exchange"] | {"core"}
CORE = BASE["core"]
LAYERS = {
    **BASE,
    "algorithms": {"algorithms"} | CORE,
    "partitioners": {"partitioners"} | CORE,
    "data": {"data", "partitioners"} | CORE,
    "nn": {"nn", "algorithms"} | CORE,
    "training": {"training", "nn", "algorithms", "data", "partitioners"} | CORE,
    "benchmark": {"benchmark", "training", "nn", "algorithms", "data", "partitioners"} | CORE,
    "commands": {"commands", "benchmark", "training", "nn", "algorithms", "data",
                 "partitioners"} | CORE,
    "cli": {"commands"} | CORE,
}
# documented in docs/architecture.md: the one upward import, inside a function
UPWARD_ALLOWED = {("spmmgnn.algorithms.construct", "spmmgnn.data.normalize"),
                  ("spmmgnn.algorithms.construct", "spmmgnn.data.pyg")}


def _module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _layer(module: str) -> str | None:
    parts = module.split(".")
    if len(parts) == 1:
        return None  # the package itself (__version__, the public names)
    if parts[1] == "cli":
        return "cli"
    return parts[1] if parts[1] in LAYERS else "core"


def _imports(modules: dict[str, Path]) -> list[tuple[str, str, int, bool]]:
    """(importer, imported module, line, at module level) for every spmmgnn import."""
    out = []
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        top = {id(n) for n in tree.body}
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.split(".")[0] == "spmmgnn"]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[:len(base) - node.level + 1]
                    mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                if mod.split(".")[0] != "spmmgnn":
                    continue
                # "from . import kernels" names a module; "from .x import f" names x
                subs = [f"{mod}.{a.name}" for a in node.names if f"{mod}.{a.name}" in modules]
                targets = subs or [mod]
            for t in targets:
                while t not in modules and "." in t:
                    t = t.rpartition(".")[0]
                out.append((name, t, node.lineno, id(node) in top))
    return out


def _package_modules(root: Path = ROOT) -> dict[str, Path]:
    return {_module_name(p, root): p for p in sorted((root / "spmmgnn").rglob("*.py"))}


def _upward(modules: dict[str, Path]) -> list[str]:
    bad = []
    for src, dst, line, _ in _imports(modules):
        a, b = _layer(src), _layer(dst)
        if a is None or b is None or (src, dst) in UPWARD_ALLOWED:
            continue
        if b not in LAYERS[a]:
            bad.append(f"{src}:{line} ({a}) imports {dst} ({b})")
    return bad


def _cycle(modules: dict[str, Path]) -> list[str]:
    """One circle among the imports, at module level or inside a function (depth-first search
    for a back edge), or []: a function-level import that closes a circle still ties the two
    modules into one."""
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for src, dst, _, _ in _imports(modules):
        if dst != src and not src.startswith(dst + ".") and dst != "spmmgnn":
            edges[src].add(dst)
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> list[str]:
        state[m] = 1
        for d in sorted(edges[m]):
            if state.get(d) == 1:
                return path[path.index(d):] + [m, d] if d in path else [m, d]
            if d not in state and (found := visit(d, path + [m])):
                return found
        state[m] = 2
        return []

    for m in sorted(edges):
        if m not in state and (found := visit(m, [])):
            return found
    return []


def test_no_module_imports_a_higher_layer():
    """Every import (module level or inside a function) goes down the layer table of
    docs/architecture.md, except the documented one."""
    bad = _upward(_package_modules())
    assert not bad, "\n".join(bad)
    # the table is the one the docs print
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    for layer in LAYERS:
        if layer not in ("core", "cli"):
            assert f"| `{layer}/` |" in doc, layer


def test_import_graph_has_no_cycle():
    cycle = _cycle(_package_modules())
    assert not cycle, " -> ".join(cycle)


def test_import_checks_see_an_upward_import_and_a_circle(tmp_path):
    """The checkers themselves, on a small package: the core importing a command (inside a
    function) is upward; two data modules importing each other at module level are a circle,
    and so are two importing each other, one of them inside a function."""
    pkg = tmp_path / "spmmgnn"
    for d in ("", "data", "commands"):
        (pkg / d).mkdir(exist_ok=True)
        (pkg / d / "__init__.py").write_text("")
    (pkg / "halo.py").write_text("def f():\n    from .commands import train\n")
    (pkg / "commands" / "train.py").write_text("def main():\n    pass\n")
    (pkg / "data" / "a.py").write_text("from .b import g\n")
    (pkg / "data" / "b.py").write_text("from . import a\n\ndef g():\n    pass\n")
    modules = _package_modules(tmp_path)
    assert _upward(modules) == ["spmmgnn.halo:2 (core) imports spmmgnn.commands.train "
                                "(commands)"]
    assert _cycle(modules) == ["spmmgnn.data.a", "spmmgnn.data.b", "spmmgnn.data.a"]
    (pkg / "data" / "b.py").write_text("def g():\n    from . import a\n")
    assert _cycle(_package_modules(tmp_path)) == ["spmmgnn.data.a", "spmmgnn.data.b",
                                                  "spmmgnn.data.a"]
    (pkg / "data" / "b.py").write_text("def g():\n    pass\n")
    assert _cycle(_package_modules(tmp_path)) == []


MAX_MODULE_LINES = 500
MAX_TOP_LEVEL_MODULES = 15


def test_every_module_is_one_room():
    """No module of the package over ``MAX_MODULE_LINES`` lines: a longer one mixes concerns
    (split it along its concepts, as ``DistSpMM`` became construct/rows/validate/registry)."""
    long = {str(p.relative_to(ROOT)): n for p in sorted((ROOT / "spmmgnn").rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


def test_the_tree_shows_the_architecture():
    """At most ``MAX_TOP_LEVEL_MODULES`` modules directly in ``spmmgnn/``: the rest live in
    the packages named after the concepts (runtime, local, backend, exchange, ...)."""
    top = sorted(p.name for p in (ROOT / "spmmgnn").glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top


BACKEND_NAMES = {"HOST", "HostBackend", "TorchBackend"}
DEVICE_WORDS = {"cuda", "cpu", "none"}


def _device_decision(node: ast.AST) -> str | None:
    """What makes ``node`` a host-or-device decision, or None."""
    def devicey(n: ast.AST) -> bool:
        return ((isinstance(n, ast.Name) and n.id in ("device", "dev"))
                or (isinstance(n, ast.Attribute) and n.attr in ("device", "device_path"))
                or (isinstance(n, ast.Attribute) and n.attr == "type" and devicey(n.value)))
    if isinstance(node, ast.Compare):
        parts = [node.left, *node.comparators]
        if any(isinstance(p, ast.Name) and p.id in BACKEND_NAMES for p in parts):
            return "compares with a backend"
        if any(devicey(p) for p in parts) and any(
                isinstance(p, ast.Constant) and (p.value is None or p.value in DEVICE_WORDS)
                for p in parts):
            return "compares a device"
    if isinstance(node, ast.Call):
        f = ast.unparse(node.func)
        if f.startswith("torch.cuda."):
            return f
        if f == "isinstance" and len(node.args) == 2 and any(
                b in ast.unparse(node.args[1]) for b in BACKEND_NAMES):
            return "isinstance of a backend"
    if isinstance(node, ast.keyword) and node.arg == "on_device":
        return "on_device="
    return None


MAX_DEVICE_DECISIONS = 4


def test_host_or_device_is_decided_in_the_backend():
    """The grid chooses its backend once; code outside ``spmmgnn/backend/`` calls it rather
    than asking where the data lives. At most ``MAX_DEVICE_DECISIONS`` such questions stand
    outside the backend package (each listed, so a new one is seen in review): a comparison
    of a device or with a backend object, a ``torch.cuda`` call, an ``on_device=`` switch.
    ``is_torch(x)`` on a caller's argument is not one: it keeps the API's promise that a
    tensor in gives a tensor out, on any backend."""
    found = []
    for path in sorted((ROOT / "spmmgnn").rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[1] == "backend":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            why = _device_decision(node)
            if why:
                found.append(f"{rel}:{node.lineno}: {why}: {ast.unparse(node)[:70]}")
    assert len(found) <= MAX_DEVICE_DECISIONS, "\n".join(found)


@pytest.mark.slow
def test_the_fast_subset_is_the_listed_mpi_tests():
    """``-m "not slow"`` keeps, of the tests that launch ``mpiexec``, exactly those
    ``conftest.FAST_MPI`` lists (each names a real test: a renamed one would silently drop
    out of the fast subset)."""
    from ..conftest import FAST_MPI

    files = sorted({n.split("::")[0] for n in FAST_MPI})
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                           "-p", "no:cacheprovider", "-m", "mpi and not slow", *files],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    got = {ln.strip() for ln in proc.stdout.splitlines() if "::" in ln}
    assert got == set(FAST_MPI), (sorted(set(FAST_MPI) - got), sorted(got - set(FAST_MPI)),
                                  proc.stderr[-2000:])
