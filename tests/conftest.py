"""Test-wide settings: numba may start up to 4 threads even on a smaller machine, so the
thread-count tests really run 2 and 3 threads (oversubscribed if need be) instead of being
clamped to 1 and silently comparing 1 thread with 1 thread; and the ``mpi`` marker, set on
every test that launches ``mpiexec``."""

from __future__ import annotations

import inspect
import json
import os
import sys
import types

import pytest

from .mpi import run_mpi_json

os.environ.setdefault("NUMBA_NUM_THREADS", str(max(4, os.cpu_count() or 1)))

# what starts ``mpiexec`` (tests/mpi.py); a test that reaches one of these is marked ``mpi``
LAUNCHERS = frozenset({"run_mpi", "run_mpi_json", "run_cli", "mpiexec", "run_mpmd",
                       "mpmd_command"})


def _names(code: types.CodeType) -> set[str]:
    """Global names a code object and the functions nested in it refer to."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


def _launches(fn, module, seen: set) -> bool:
    """Does ``fn`` call a launcher, directly or through functions of its own module?"""
    fn = inspect.unwrap(fn)
    if not isinstance(fn, types.FunctionType) or fn in seen:
        return False
    seen.add(fn)
    for name in _names(fn.__code__):
        if name in LAUNCHERS:
            return True
        obj = getattr(module, name, None)
        if (isinstance(obj, types.FunctionType) and obj.__module__ == module.__name__
                and _launches(obj, module, seen)):
            return True
    return False


@pytest.fixture(autouse=True)
def _mpiexec_only_when_marked(request, monkeypatch):
    """A test the marker missed fails instead of launching mpiexec: the marker stays true."""
    if request.node.get_closest_marker("mpi") is None:
        monkeypatch.setenv("SPMMGNN_TEST_NOT_MPI", "1")


def pytest_collection_modifyitems(config, items):
    """Mark every test that launches ``mpiexec`` (itself, through a helper of its module, or
    through a fixture of any module, ``mpi_json`` included) with ``mpi``: ``-m "not mpi"``
    runs the in-process tests alone."""
    for item in items:
        fns = [(item.function, item.module)]  # and each fixture with its own module
        info = getattr(item, "_fixtureinfo", None)
        for defs in (info.name2fixturedefs.values() if info else ()):
            fns += [(d.func, sys.modules.get(getattr(d.func, "__module__", ""))) for d in defs]
        if any(mod is not None and _launches(fn, mod, set()) for fn, mod in fns):
            item.add_marker(pytest.mark.mpi)


@pytest.fixture(scope="session")
def mpi_json(tmp_path_factory):
    """``mpi_json(P, worker, *args, **kw)``: the JSON a worker script writes when run on P
    ranks, run once per session for each (P, worker, args): every test of the run shares
    it, and no test module keeps a cache of its own."""
    results: dict = {}

    def run(P: int, worker: str, *args: str, **kw):
        key = (P, worker, args, tuple(sorted(kw.items())))
        if key not in results:
            tmp = tmp_path_factory.mktemp(f"{worker.removesuffix('.py')}-{P}")
            results[key] = run_mpi_json(P, worker, tmp, *args, **kw)
        return results[key]

    return run


@pytest.fixture(scope="session")
def reference_for():
    """``reference_for(graph_spec, case)``: the single-process PyTorch run of a training parity
    case (tests/test_training.py), computed once per session for every case that shares its
    model, data and seed (parity at P = 2, 3, 4 and at P = 16 use the same references)."""
    from .test_training import reference_run

    runs: dict = {}

    def get(graph_spec, case) -> dict:
        key = json.dumps([graph_spec, {k: case[k] for k in sorted(case) if k not in
                                       ("algorithm", "P", "c", "losses", "final", "symmetric",
                                        "sizes", "error", "partition", "cache")}])
        if key not in runs:
            runs[key] = reference_run(graph_spec, case)
        return runs[key]

    return get
