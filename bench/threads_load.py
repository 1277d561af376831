"""Threads under load (issues 46 and 48): does a rank's 2-thread kernel survive a second
process busy on one core, and do its idle threads leave the core to the caller's next call?

    python bench/threads_load.py [--repeat 7] [--n 120000]

For each OpenMP wait policy (``ACTIVE``: idle threads spin; ``PASSIVE``: they sleep, what
``import spmmgnn`` sets unless the user set it) and each machine state (``quiet``; ``busy``:
one ``python -c 'while 1: pass'`` process beside it), a child process times, at 2 numba
threads:

* the CSR x dense kernel (``LocalCSR.matmul``) on an n-row matrix with locality (each row's
  8 columns within +-64 of the diagonal), f = 16, 64, 128: min of ``--repeat`` calls;
* the CPU time the process burns while its caller sleeps 200 ms right after a kernel
  (idle threads that spin burn it; min of 3);
* the caller's next numpy call right after the kernel returns (a 1M-element ``np.sum`` on
  the calling thread) against the same call after a 50 ms sleep: spinning workers would
  slow it down.

Writes bench/results/threads-under-load.{json,md}. The machine may be shared: the load
average is recorded around every child; read it before the absolute times.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import RESULTS, machine, write_json  # noqa: E402
from spmmgnn.runtime.atomic import write_text_atomic  # noqa: E402

WIDTHS = (16, 64, 128)


def banded(n: int, per_row: int = 8, width: int = 64, seed: int = 0):
    """An n x n CSR with ``per_row`` columns per row within +-width of the diagonal."""
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    rows = np.repeat(np.arange(n), per_row)
    cols = np.clip(rows + rng.integers(-width, width + 1, rows.size), 0, n - 1)
    return sp.csr_array((rng.random(rows.size), (rows, cols)), shape=(n, n))


def child(args) -> dict:
    import numba

    from spmmgnn.local.local_matrix import LocalCSR

    numba.set_num_threads(2)
    M = LocalCSR(banded(args.n))
    M.kernel = "plain"  # one variant everywhere: the comparison is the threads, not the choice
    res: dict = {"threading_layer": None, "kernel_ms": {}}
    v = np.random.default_rng(1).random(1_000_000)
    for f in WIDTHS:
        x = np.random.default_rng(f).random((args.n, f)).astype(np.float32)
        out = np.empty_like(x)
        M.matmul(x, out, False)  # compile / load, choose
        best = np.inf
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            M.matmul(x, out, False)
            best = min(best, time.perf_counter() - t0)
        res["kernel_ms"][str(f)] = best * 1e3
    res["threading_layer"] = numba.threading_layer()
    x = np.random.default_rng(0).random((args.n, 16)).astype(np.float32)
    out = np.empty_like(x)
    after, rested = np.inf, np.inf
    for _ in range(args.repeat):
        M.matmul(x, out, False)
        t0 = time.perf_counter()
        v.sum()
        after = min(after, time.perf_counter() - t0)
        time.sleep(0.05)
        t0 = time.perf_counter()
        v.sum()
        rested = min(rested, time.perf_counter() - t0)
    idle = np.inf
    for _ in range(3):  # the process's CPU time while its caller sleeps after a kernel
        M.matmul(x, out, False)
        c0 = time.process_time()
        time.sleep(0.2)
        idle = min(idle, time.process_time() - c0)
    res["idle_cpu_ms"] = idle * 1e3
    res["numpy_after_kernel_ms"] = after * 1e3
    res["numpy_rested_ms"] = rested * 1e3
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--n", type=int, default=120_000)
    ap.add_argument("--out", default=str(RESULTS / "threads-under-load"))
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--json", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        Path(args.json).write_text(json.dumps(child(args)))
        return
    rows = []
    here = str(Path(__file__).resolve())
    with tempfile.TemporaryDirectory() as tmp:
        for state in ("quiet", "busy"):
            for policy in ("ACTIVE", "PASSIVE"):
                hog = (subprocess.Popen([sys.executable, "-c", "while 1: pass"])
                       if state == "busy" else None)
                try:
                    load = os.getloadavg()[0]
                    out = Path(tmp) / f"{state}-{policy}.json"
                    env = dict(os.environ, OMP_WAIT_POLICY=policy,
                               PYTHONPATH=str(Path(here).parents[1]))
                    env.pop("GOMP_SPINCOUNT", None)
                    subprocess.run([sys.executable, here, "--child", "--json", str(out),
                                    "--repeat", str(args.repeat), "--n", str(args.n)],
                                   check=True, env=env, timeout=900)
                finally:
                    if hog is not None:
                        hog.kill()
                        hog.wait()
                row = dict(state=state, policy=policy, load_before=load,
                           load_after=os.getloadavg()[0], **json.loads(out.read_text()))
                rows.append(row)
                print(row, flush=True)
    write_json(Path(args.out).with_suffix(".json"),
               dict(machine=machine(), args=vars(args), rows=rows))
    write_text_atomic(Path(args.out).with_suffix(".md"), report(rows, args))


def report(rows: list[dict], args) -> str:
    lines = [f"Threads under load (`python bench/threads_load.py --repeat {args.repeat} "
             f"--n {args.n}`), numba's `{rows[0]['threading_layer']}` layer, 2 threads, "
             f"float32, min of {args.repeat} calls, milliseconds. *busy*: one "
             "`python -c 'while 1: pass'` beside it. The machine was shared with other "
             "jobs: the load average (1 min) is in the table; no row was measured quiet.", "",
             "| machine | OMP_WAIT_POLICY | load | " + " | ".join(f"kernel f={f}" for f in WIDTHS)
             + " | CPU ms burnt in 200 ms idle after a kernel | numpy call right after a "
             "kernel | same call after 50 ms |",
             "|---|---|---:|" + "---:|" * len(WIDTHS) + "---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['state']} | {r['policy']} | {r['load_before']:.1f}-"
                     f"{r['load_after']:.1f} | "
                     + " | ".join(f"{r['kernel_ms'][str(f)]:.2f}" for f in WIDTHS)
                     + f" | {r['idle_cpu_ms']:.0f} | {r['numpy_after_kernel_ms']:.3f} | "
                     f"{r['numpy_rested_ms']:.3f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
