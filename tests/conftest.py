"""Test-wide settings: numba may start up to 4 threads even on a smaller machine, so the
thread-count tests really run 2 and 3 threads (oversubscribed if need be) instead of being
clamped to 1 and silently comparing 1 thread with 1 thread; the ``mpi`` marker, set on
every test that launches ``mpiexec``; and the fast subset (``FAST_MPI``)."""

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

# The fast subset, ``-m "not slow"``: every in-process test and these tests that launch
# ``mpiexec``, one or two per surface (the SpMM families, the API's collective errors, the
# CLI, training, faults, the node-aware exchange, the device path, a README snippet, the
# benchmark tools); every other test that launches ``mpiexec`` is marked ``slow`` too.
# tests/project/test_style.py checks that each one names a test.
FAST_MPI = frozenset({
    "tests/algorithms/test_spmm_1d.py::test_matches_scipy[sparse1d-2]",
    "tests/algorithms/test_spmm_1d.py::test_matches_scipy[oblivious1d-2]",
    "tests/algorithms/test_spmm_15d.py::test_matches_scipy[4-2]",
    "tests/algorithms/test_spmm_grid.py::test_equals_scipy[4]",
    "tests/core/test_api.py::test_errors_are_collective[nan_one_rank-3]",
    "tests/core/test_api.py::test_cli_error_is_one_line_and_nonzero",
    "tests/algorithms/test_agreement.py::test_disagreeing_ranks_get_one_collective_error[sparse1d]",
    "tests/algorithms/test_linalg.py::test_reductions_count_every_row_once[3]",
    "tests/exchange/test_node_exchange.py::test_node_aware_equals_scipy_and_the_flat_exchange[4]",
    "tests/backend/test_device.py::test_device_cpu_equals_scipy_and_numpy_path[2]",
    "tests/training/test_training.py::test_parity_with_single_process[sparse1d-2]",
    "tests/training/test_training.py::test_mpiexec_found",
    "tests/runtime/test_faults.py::test_setup_error_on_one_rank_is_collective[halo-ghost]",
    "tests/commands/test_partition_cli.py::test_runs_name_the_partition_and_its_seconds",
    "tests/benchmark/test_bench_cli.py::test_report_writes_every_plot",
    "tests/project/test_docs.py::test_snippet_runs[README.md:53-P2]",
    "tests/training/test_progress.py::test_under_mpiexec_the_progress_line_is_not_redrawn",
    "tests/benchmark/test_bench_suite.py::test_a_failed_child_names_its_command_and_stderr",
})


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
            if item.nodeid not in FAST_MPI:
                item.add_marker(pytest.mark.slow)


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
    case (tests/training/test_training.py), computed once per session for every case that
    shares its model, data and seed (parity at P = 2, 3, 4 and at P = 16 use the same
    references)."""
    from .training.test_training import reference_run

    runs: dict = {}

    def get(graph_spec, case) -> dict:
        key = json.dumps([graph_spec, {k: case[k] for k in sorted(case) if k not in
                                       ("algorithm", "P", "c", "losses", "final", "symmetric",
                                        "sizes", "error", "partition", "cache")}])
        if key not in runs:
            runs[key] = reference_run(graph_spec, case)
        return runs[key]

    return get
