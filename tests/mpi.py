"""Launch real ``mpiexec -n P`` subprocesses for the MPI tests."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent
WORKERS = TESTS / "workers"  # the workers several test folders share (common.py among them)
NOT_MARKED = "SPMMGNN_TEST_NOT_MPI"  # set by conftest.py while a test without ``mpi`` runs


def mpiexec() -> str:
    """The mpiexec of this environment (the mpich wheel puts it next to python)."""
    if os.environ.get(NOT_MARKED):
        raise RuntimeError("this test launches mpiexec but tests/conftest.py did not mark it "
                           "'mpi': name the launcher in conftest.LAUNCHERS")
    local = Path(sys.executable).parent / "mpiexec"
    if local.exists():
        return str(local)
    found = shutil.which("mpiexec")
    if not found:
        raise RuntimeError("mpiexec not found: install the 'mpich' wheel or a system MPI")
    return found


@functools.cache
def _workers() -> dict[str, Path]:
    """Every worker script, ``tests/**/workers/*.py``, by its file name (the names are
    unique: a worker lives in the ``workers/`` folder beside the tests that launch it, or in
    ``tests/workers/`` when tests of several folders do)."""
    found: dict[str, list[Path]] = {}
    for path in sorted(TESTS.glob("**/workers/*.py")):
        found.setdefault(path.name, []).append(path)
    twice = {name: [str(p.relative_to(TESTS)) for p in paths]
             for name, paths in found.items() if len(paths) > 1}
    if twice:
        raise RuntimeError(f"worker names must be unique under tests/: {twice}")
    return {name: paths[0] for name, paths in found.items()}


def worker(script: str) -> Path:
    """The path of the worker script named ``script`` (``"spmm_cases.py"``), wherever it
    lives under ``tests/``; an absolute path is returned as it is."""
    if os.path.isabs(script):
        return Path(script)
    found = _workers().get(script)
    if found is None:
        raise FileNotFoundError(f"no worker {script!r} in any tests/**/workers/ folder")
    return found


# MPICH's busy wait, oversubscribed: with more ranks than cores (the suite's P = 3-32 on
# CI's 2 cores) its spinning ranks stalled the ones with work for seconds at a time (the
# backend matrix at P = 4 on 2 cores: 87-169 s, 15 s with heavy yield); not oversubscribed
# it costs latency (P = 2 on 2 cores: an 8-byte Allreduce 4.7 us -> 180 us), so it is set
# only for launches with more ranks than this process's cores, unless the caller set it.
HEAVY_YIELD = "MPIR_CVAR_ENABLE_HEAVY_YIELD"


def mpi_env(env: dict | None = None, ranks: int = 1) -> dict:
    """The environment of the launched jobs: one library thread a rank, unbuffered output;
    MPICH's waits yield the core (``HEAVY_YIELD``) when ``ranks`` exceed the cores."""
    from spmmgnn.runtime.threads import affinity

    full = dict(os.environ, SPMMGNN_THREADS="1", PYTHONUNBUFFERED="1")
    if ranks > len(affinity()):
        full.setdefault(HEAVY_YIELD, "1")
    full.update(env or {})
    return full


def run_mpi(n: int, script: str, *args: str, timeout: float = 300,
            check: bool = True, env: dict | None = None,
            prefix: list[str] | None = None) -> subprocess.CompletedProcess:
    """Run the worker ``script`` (found by name under ``tests/**/workers/``, see ``worker``;
    or an absolute path) on n ranks; returns the process.
    ``prefix`` goes between mpiexec's options and python (e.g. ``own_files``). The workers
    import spmmgnn with ``SPMMGNN_ABORT_ON_EXCEPTION=1`` (the abort hook, as a script run
    under mpiexec should have it), so a worker's bug on one rank ends the job at once."""
    target = str(worker(script))
    cmd = [mpiexec(), "-n", str(n), *(prefix or []), sys.executable, target, *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env=mpi_env({"SPMMGNN_ABORT_ON_EXCEPTION": "1", **(env or {})}, n))
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {proc.returncode}\n--- stdout\n"
                             f"{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-6000:]}")
    return proc


def own_files(directory: Path, stdout: bool = False) -> list[str]:
    """Command prefix making each rank write its stderr (and with ``stdout`` its stdout) to
    ``directory/rank<r>.err`` (``.out``) itself, by a shell ``exec`` redirect. Hydra forwards
    rank output through its proxies, and when a rank aborts the job the proxies may end before
    forwarding what the rank printed just before (seen about once in 40 aborted runs on a
    loaded machine); what a rank wrote to its own file is there whatever Hydra does."""
    directory.mkdir(parents=True, exist_ok=True)
    out = f' >"{directory}/rank$PMI_RANK.out"' if stdout else ""
    return ["sh", "-c", f'exec "$0" "$@" 2>"{directory}/rank$PMI_RANK.err"{out}']


def read_own_files(directory: Path, n: int, suffix: str = "err") -> list[str]:
    """What each of n ranks wrote to its file (see ``own_files``; "" if it wrote none)."""
    files = [directory / f"rank{r}.{suffix}" for r in range(n)]
    return [f.read_text(errors="replace") if f.exists() else "" for f in files]


def run_mpi_json(n: int, script: str, tmp_path: Path, *args: str, **kw):
    """Run a worker that writes JSON to the path given as its first argument."""
    out = tmp_path / f"{Path(script).stem}-{n}.json"
    run_mpi(n, script, str(out), *args, **kw)
    return json.loads(out.read_text())


def run_cli(n: int, *args: str, timeout: float = 300, env: dict | None = None):
    """``mpiexec -n n python -m spmmgnn.cli ARGS`` without failing on a non-zero exit."""
    cmd = [mpiexec(), "-n", str(n), sys.executable, "-m", "spmmgnn.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env=mpi_env(env, n))


def mpmd_command(*ranks: list[str], rank_env: list[dict] | None = None,
                 prefix: list[str] | None = None) -> list[str]:
    """An MPMD launch, one rank per argument list, each rank its own command line:
    ``mpiexec -n 1 [-env K V] [prefix] python ARGS0 : -n 1 ... python ARGS1 ...``;
    ``rank_env[r]``: variables set for rank r only."""
    cmd = [mpiexec()]
    for r, args in enumerate(ranks):
        env = [x for k, v in (rank_env[r] if rank_env else {}).items() for x in ("-env", k, v)]
        cmd += [*([":"] if r else []), "-n", "1", *env, *(prefix or []), sys.executable, *args]
    return cmd


def run_mpmd(*ranks: list[str], timeout: float = 300, env: dict | None = None,
             rank_env: list[dict] | None = None) -> subprocess.CompletedProcess:
    """Run an MPMD launch (``mpmd_command``) without failing on a non-zero exit; a rank's
    arguments start with a script path or ``-m module``."""
    return subprocess.run(mpmd_command(*ranks, rank_env=rank_env), capture_output=True,
                          text=True, timeout=timeout, env=mpi_env(env, len(ranks)))


def one_line_error(proc, *words: str, status: int = 2) -> None:
    """Exit status, one ``error:`` line naming ``words``, no traceback."""
    err = proc.stderr
    assert proc.returncode == status, err[-3000:]
    assert err.count("error:") == 1, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    for w in words:
        assert w in err, (w, err[-3000:])
