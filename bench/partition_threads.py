"""Do the threaded base partitioners of ``default`` collapse when another process holds a
core? Times KaMinPar and Mt-KaHyPar's fast preset with 1 and 2 threads, on a quiet machine
and with ``python -c 'while 1: pass'`` busy on one core (issue 47).

    python bench/partition_threads.py --out bench/results/partition-threads.md
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from spmmgnn.data.generators import grid3d, rmat  # noqa: E402
from spmmgnn.partitioners import partition  # noqa: E402

GRAPHS = {"grid3d 40^3 (mesh)": lambda: grid3d(40), "rmat s14 e8 (skewed)": lambda: rmat(14, 8)}


def timed(A, k: int, method: str, threads: int) -> float:
    t = time.perf_counter()
    partition(A, k, method=method, threads=threads)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--k", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    rows = []
    for name, make in GRAPHS.items():
        A = make()
        timed(A, 4, "kaminpar", 1)  # warm-up (numba caches, thread pools)
        for busy in (False, True):
            hog = (subprocess.Popen([sys.executable, "-c", "while 1: pass"]) if busy
                   else None)
            try:
                for method in ("kaminpar", "mtkahypar-fast", "metis-vol"):
                    for threads in ((1, 2) if method != "metis-vol" else (1,)):
                        secs = min(timed(A, args.k, method, threads)
                                   for _ in range(args.repeat))
                        rows.append((name, "busy core" if busy else "quiet", method,
                                     threads, secs, os.getloadavg()[0]))
                        print(*rows[-1], flush=True)
            finally:
                if hog is not None:
                    hog.kill()
                    hog.wait()
    lines = ["| graph | other process | method | threads | seconds (best of "
             f"{args.repeat}) | load |", "| --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {g} | {b} | {m} | {t} | {s:.2f} | {ld:.1f} |" for g, b, m, t, s, ld in rows]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
