"""What every benchmark program needs around its measurement: the machine it ran on, the
launcher of child jobs (``mpiexec`` and this environment's ``spmmgnn``), timing loops, the
load of a shared machine, and results written atomically.

One copy of each, for ``spmmgnn bench`` and for the programs of the repository's ``bench/``
package (``python -m bench.<name>``): a job started here gets this environment's
``mpiexec`` (the ``mpich`` wheel puts it next to ``python``), and a failed child is one
``LaunchError`` with its command and the end of its stderr.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..runtime.atomic import write_text_atomic


# ---------------------------------------------------------------- the machine
def cpu_model() -> str:
    """The CPU's model name from ``/proc/cpuinfo`` (``platform.processor()`` is often empty
    on Linux), or the architecture."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine() or "unknown CPU"


def machine() -> dict:
    """Where a number was measured: host, OS, CPU, the cores this process may run on,
    Python, and the MPI library when this process uses MPI (``mpi4py.MPI`` imported)."""
    out = dict(host=platform.node(), platform=platform.platform(),
               processor=platform.processor() or platform.machine(), cpu=cpu_model(),
               cores=len(os.sched_getaffinity(0)), python=platform.python_version())
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None:
        out["mpi"] = mpi.Get_library_version().splitlines()[0].strip()
    return out


def load_average() -> tuple[float, float, float]:
    """The 1, 5 and 15-minute load averages (the machine may be shared: quote them)."""
    return os.getloadavg()


def uptime() -> str:
    """``uptime``'s line (time, up since, users, load averages)."""
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True,
                              timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        one, five, fifteen = load_average()
        return f"load average: {one:.2f}, {five:.2f}, {fifteen:.2f}"


def now() -> str:
    """The current UTC time as the results record it."""
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())


# ---------------------------------------------------------------- child jobs
class LaunchError(RuntimeError):
    """A child job exited non-zero (or was killed): its command and the end of its stderr."""


@dataclass
class Ran:
    """A finished child job: whole-process wall seconds, its output and exit status."""
    seconds: float
    stdout: str
    stderr: str
    returncode: int

    def last_json(self):
        """The last line of stdout parsed as JSON (the workers' way of answering)."""
        lines = self.stdout.strip().splitlines()
        if not lines:
            raise LaunchError(f"the job printed nothing; stderr:\n{self.stderr[-3000:]}")
        return json.loads(lines[-1])


def _bin(name: str) -> Path:
    return Path(sys.executable).parent / name


def mpiexec() -> str:
    """This environment's ``mpiexec`` (next to ``python``: the mpich wheel's), else the
    PATH's."""
    local = _bin("mpiexec")
    return str(local) if local.exists() else "mpiexec"


def spmmgnn_command() -> list[str]:
    """This environment's ``spmmgnn`` command (``python -m spmmgnn.cli`` where the script is
    not installed)."""
    script = _bin("spmmgnn")
    return [str(script)] if script.exists() else [sys.executable, "-m", "spmmgnn.cli"]


def python_module(name: str, *args: str) -> list[str]:
    """``python -m name args``: a program of the ``bench`` package (run from the repository
    root, where ``bench`` is importable)."""
    return [sys.executable, "-m", name, *args]


def library_from(tree: str | os.PathLike, folder: str | os.PathLike,
                 rest: str | os.PathLike) -> dict[str, str]:
    """The environment of a child that measures the ``spmmgnn`` of ``tree`` (another
    commit's source, unpacked by ``git archive``) with everything else from ``rest`` (this
    checkout: the ``bench`` programs): ``folder`` gets a link to ``tree/spmmgnn`` and comes
    first on the import path. Start the child in ``folder`` (``cwd=``), not in ``rest``,
    whose own ``spmmgnn`` would come first."""
    link = Path(folder) / "spmmgnn"
    if not link.exists():
        link.symlink_to(Path(tree).resolve() / "spmmgnn", target_is_directory=True)
    parts = [str(Path(folder).resolve()), str(Path(rest).resolve())]
    if os.environ.get("PYTHONPATH"):
        parts.append(os.environ["PYTHONPATH"])
    return {"PYTHONPATH": os.pathsep.join(parts)}


def threads_env(threads: int) -> dict[str, str]:
    """A child's threads per rank: spmmgnn's (numba's and numpy's BLAS) and OpenMP's."""
    return dict(SPMMGNN_THREADS=str(threads), OMP_NUM_THREADS=str(threads))


def run(cmd: Sequence[str], *, env: Mapping[str, str] | None = None,
        timeout: float | None = None, cwd: str | os.PathLike | None = None,
        check: bool = True) -> Ran:
    """Run ``cmd`` to its end (``env`` adds to this process's environment); with ``check``,
    a non-zero exit or the ``timeout`` is a ``LaunchError`` naming the command."""
    cmd = [str(c) for c in cmd]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd,
                              env=dict(os.environ, **(env or {})))
    except subprocess.TimeoutExpired as exc:
        if not check:
            raise
        err = exc.stderr or ""
        err = err.decode(errors="replace") if isinstance(err, bytes) else err
        raise LaunchError(f"{' '.join(cmd)} did not finish in {timeout:.0f} s\n"
                          f"{err[-3000:]}") from None
    ran = Ran(time.perf_counter() - t0, proc.stdout, proc.stderr, proc.returncode)
    if check and proc.returncode != 0:
        raise LaunchError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return ran


def run_mpi(P: int, cmd: Sequence[str], **kw) -> Ran:
    """``mpiexec -n P cmd`` (this environment's ``mpiexec``) through ``run``."""
    return run([mpiexec(), "-n", str(P), *cmd], **kw)


# ---------------------------------------------------------------- timing
def seconds(fn: Callable[[], object]) -> float:
    """Wall seconds of one call."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def best_time(fn: Callable[[], object], repeat: int = 5, warmup: int = 1) -> dict:
    """Call ``fn`` ``warmup`` + ``repeat`` times; the min and median seconds of the timed
    calls."""
    for _ in range(warmup):
        fn()
    times = [seconds(fn) for _ in range(repeat)]
    return dict(min=float(min(times)), median=float(np.median(times)))


def interleaved(fns: Mapping[str, Callable[[], object]], repeat: int) -> dict[str, float]:
    """Best seconds of each callable, run round robin ``repeat`` times after one warm-up
    call each: load from other processes hits every variant alike."""
    for fn in fns.values():
        fn()
    best = dict.fromkeys(fns, np.inf)
    for _ in range(repeat):
        for name, fn in fns.items():
            best[name] = min(best[name], seconds(fn))
    return best


# ---------------------------------------------------------------- results
def write_json(path: str | os.PathLike, payload) -> Path:
    """``payload`` as indented JSON, written atomically; returns the path."""
    path = Path(path)
    write_text_atomic(path, json.dumps(payload, indent=2))
    return path
