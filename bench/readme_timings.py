"""The timings the README and docs/getting-started.md quote, measured by one named command.

- ``cold``: the README's main job (``mpiexec -n 2 spmmgnn train``, 100 epochs) with an empty
  numba cache (``NUMBA_CACHE_DIR`` a fresh directory): every kernel compiles;
- ``warm``: the same job again ``--repeat`` times with that cache filled (the median);
- per run: the whole process's wall seconds (``mpiexec`` to exit), the 100 epochs' seconds and
  the steady ms per epoch from ``train --json`` (rank 0);
- ``--suite``: the test suite (``python -m pytest -q``), whole-process wall seconds, and
  ``--fast`` its fast subset (``python -m pytest -q -m "not slow"``).

The load average is recorded before and after each part (the machine is shared: quote it).

    python -m bench.readme_timings [--suite] [--fast] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import RESULTS, ROOT
from spmmgnn.benchmark.harness import machine, run, run_mpi, spmmgnn_command
from spmmgnn.benchmark.tables import md_table, publish, where


def train_run(cache: Path) -> dict:
    """One README main job; whole-process wall seconds and the run's own epoch figures."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run.json"
        wall = run_mpi(2, [*spmmgnn_command(), "train", "--quiet", "--json", str(out)],
                       env=dict(NUMBA_CACHE_DIR=str(cache))).seconds
        r = json.loads(out.read_text())
    return dict(wall_seconds=wall, epochs_seconds=r["wall_seconds"],
                ms_per_epoch=1e3 * r["steady_epoch_wall_seconds"],
                test_acc=r["final"].get("test_acc"))


def render(data: dict) -> str:
    lines = ["# The README's timings", "",
             f"Written by `{data.get('command', 'python -m bench.readme_timings')}` on "
             f"{where(data['machine'])} ({data['machine']['cores']} cores), {data['when']}. "
             "Whole-process wall seconds.", ""]
    rows = [[f"`mpiexec -n 2 spmmgnn train` ({name} numba cache)",
             f"{data[name]['wall_seconds']:.1f}", f"{data[name]['epochs_seconds']:.2f}",
             f"{data[name]['ms_per_epoch']:.1f}", data[name]["load"]]
            for name in ("cold", "warm")]
    for key, command in (("suite", "python -m pytest -q"),
                         ("fast", 'python -m pytest -q -m "not slow"')):
        if data.get(key):
            s = data[key]
            rows.append([f"`{command}`" + (f" ({s['summary']})" if s.get("summary") else ""),
                         f"{s['wall_seconds']:.0f}", "", "", s["load"]])
    lines += md_table(["what", "wall s", "epochs s", "ms / epoch", "load before -> after"],
                      rows, "lrrrl")
    return "\n".join(lines) + "\n"


def _load(before: float, after: float) -> str:
    return f"{before:.2f} -> {after:.2f}"


def pytest(*marks: str) -> dict:
    """The test suite (or the subset ``marks`` select) in one process: wall seconds, its
    summary line and the load around it."""
    before = os.getloadavg()[0]
    ran = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *marks],
              cwd=ROOT, check=False)
    lines = [ln for ln in ran.stdout.splitlines() if ln.strip()]
    return dict(wall_seconds=ran.seconds, load=_load(before, os.getloadavg()[0]),
                summary=(lines[-1].strip("= ") if lines else ""), exit=ran.returncode)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="warm runs (the median is kept)")
    ap.add_argument("--suite", action="store_true", help="also time the test suite")
    ap.add_argument("--fast", action="store_true", help='also time -m "not slow"')
    ap.add_argument("--out", default=str(RESULTS / "readme-timings.json"))
    args = ap.parse_args()
    data = dict(machine=machine(), when=time.strftime("%Y-%m-%d %H:%M"),
                command=("python -m bench.readme_timings " + " ".join(sys.argv[1:])).strip())
    with tempfile.TemporaryDirectory() as cache:
        before = os.getloadavg()[0]
        data["cold"] = train_run(Path(cache))
        data["cold"]["load"] = _load(before, os.getloadavg()[0])
        before = os.getloadavg()[0]
        warm = [train_run(Path(cache)) for _ in range(args.repeat)]
        med = {k: float(np.median([w[k] for w in warm])) for k in warm[0] if k != "test_acc"}
        data["warm"] = med | dict(runs=warm, load=_load(before, os.getloadavg()[0]))
    print(f"cold {data['cold']['wall_seconds']:.1f} s, warm {data['warm']['wall_seconds']:.1f} s"
          f" ({data['warm']['ms_per_epoch']:.1f} ms/epoch)", flush=True)
    if args.fast:
        data["fast"] = pytest("-m", "not slow")
        print(f"fast subset: {data['fast']['wall_seconds']:.0f} s", flush=True)
    if args.suite:
        data["suite"] = pytest()
    paths = publish(Path(args.out).with_suffix(""), data, render)
    print(f"wrote {paths[0]} and {paths[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
