"""The timings the README and docs/getting-started.md quote, measured by one named command.

- ``cold``: the README's main job (``mpiexec -n 2 spmmgnn train``, 100 epochs) with an empty
  numba cache (``NUMBA_CACHE_DIR`` a fresh directory): every kernel compiles;
- ``warm``: the same job again ``--repeat`` times with that cache filled (the median);
- per run: the whole process's wall seconds (``mpiexec`` to exit), the 100 epochs' seconds and
  the steady ms per epoch from ``train --json`` (rank 0);
- ``--suite``: the test suite (``python -m pytest -q``), whole-process wall seconds.

``uptime`` is recorded before and after each part (the machine is shared: quote the load).

    python bench/readme_timings.py [--suite] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from spmmgnn.runtime.atomic import write_text_atomic

from common import RESULTS, machine, mpiexec, write_json

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[1]


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def train_run(cache: Path) -> dict:
    """One README main job; whole-process wall seconds and the run's own epoch figures."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run.json"
        env = dict(os.environ, NUMBA_CACHE_DIR=str(cache))
        t0 = time.perf_counter()
        proc = subprocess.run([mpiexec(), "-n", "2", str(BIN / "spmmgnn"), "train", "--quiet",
                               "--json", str(out)], capture_output=True, text=True, env=env)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr[-2000:])
        r = json.loads(out.read_text())
    return dict(wall_seconds=wall, epochs_seconds=r["wall_seconds"],
                ms_per_epoch=1e3 * r["steady_epoch_wall_seconds"],
                test_acc=r["final"].get("test_acc"))


def markdown(data: dict) -> str:
    lines = ["# The README's timings", "",
             "Written by `python bench/readme_timings.py` on "
             f"{data['machine']['processor'] or data['machine']['platform']} "
             f"({data['machine']['cores']} cores), {data['when']}. Whole-process wall seconds.",
             "", "| what | wall s | epochs s | ms / epoch | load before -> after |",
             "|---|---:|---:|---:|---|"]
    for name in ("cold", "warm"):
        r = data[name]
        lines.append(f"| `mpiexec -n 2 spmmgnn train` ({name} numba cache) | "
                     f"{r['wall_seconds']:.1f} | {r['epochs_seconds']:.2f} | "
                     f"{r['ms_per_epoch']:.1f} | {r['load']} |")
    if data.get("suite"):
        s = data["suite"]
        lines.append(f"| `python -m pytest -q` | {s['wall_seconds']:.0f} | | | {s['load']} |")
    return "\n".join(lines) + "\n"


def _load(before: str, after: str) -> str:
    def avg(s: str) -> str:
        return s.split("load average:")[-1].split(",")[0].strip()

    return f"{avg(before)} -> {avg(after)}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="warm runs (the median is kept)")
    ap.add_argument("--suite", action="store_true", help="also time the test suite")
    ap.add_argument("--out", default=str(RESULTS / "readme-timings.json"))
    args = ap.parse_args()
    data = dict(machine=machine(), when=time.strftime("%Y-%m-%d %H:%M"))
    with tempfile.TemporaryDirectory() as cache:
        before = uptime()
        data["cold"] = train_run(Path(cache)) | dict(uptime=before)
        data["cold"]["load"] = _load(before, uptime())
        before = uptime()
        warm = [train_run(Path(cache)) for _ in range(args.repeat)]
        med = {k: float(np.median([w[k] for w in warm])) for k in warm[0] if k != "test_acc"}
        data["warm"] = med | dict(runs=warm, load=_load(before, uptime()))
    print(f"cold {data['cold']['wall_seconds']:.1f} s, warm {data['warm']['wall_seconds']:.1f} s"
          f" ({data['warm']['ms_per_epoch']:.1f} ms/epoch)", flush=True)
    if args.suite:
        before = uptime()
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "pytest", "-q"], cwd=ROOT)
        data["suite"] = dict(wall_seconds=time.perf_counter() - t0, load=_load(before, uptime()))
    path = write_json(args.out, data)
    write_text_atomic(path.with_suffix(".md"), markdown(data))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
