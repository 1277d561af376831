"""Test-wide settings: numba may start up to 4 threads even on a smaller machine, so the
thread-count tests really run 2 and 3 threads (oversubscribed if need be) instead of being
clamped to 1 and silently comparing 1 thread with 1 thread; and the ``mpi`` marker, set on
every test that launches ``mpiexec``."""

from __future__ import annotations

import inspect
import os
import types

import pytest

os.environ.setdefault("NUMBA_NUM_THREADS", str(max(4, os.cpu_count() or 1)))

# what starts ``mpiexec`` (tests/mpi.py); a test that reaches one of these is marked ``mpi``
LAUNCHERS = frozenset({"run_mpi", "run_mpi_json", "run_cli", "mpiexec"})


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
    through a fixture) with ``mpi``: ``-m "not mpi"`` runs the in-process tests alone."""
    for item in items:
        module = item.module
        fns = [item.function]
        info = getattr(item, "_fixtureinfo", None)
        for defs in (info.name2fixturedefs.values() if info else ()):
            fns += [d.func for d in defs if getattr(d.func, "__module__", None) == module.__name__]
        if any(_launches(fn, module, set()) for fn in fns):
            item.add_marker(pytest.mark.mpi)
