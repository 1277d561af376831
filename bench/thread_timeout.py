"""OpenBLAS's idle-thread spin against the training step (issue 48): one rank with all the
cores' threads, ``OPENBLAS_THREAD_TIMEOUT`` at OpenBLAS's default (28: its idle threads spin
2^28 cycles, ~0.1 s, after each threaded product) and at the library's (4: they sleep at
once), in alternating processes, each a 2-layer GCN on a CSBM graph (float32, dropout 0.5,
no cached aggregation, ``partitioner none``): the median step and its breakdown over
``--epochs`` steps after 2, and the minor page faults per step.

    python bench/thread_timeout.py                      # 90k vertices, all cores
    python bench/thread_timeout.py --n 1000000 --degree 16 --classes 8   # issue 48's graph

Writes ``bench/results/thread-timeout.{json,md}`` (``--out`` to change the stem).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import RESULTS, machine, write_json  # noqa: E402

PARTS = ("spmm_local", "exchange", "allreduce", "dense", "other")


def worker(args) -> None:
    """One process: build, 2 warm-up steps, ``--epochs`` timed steps; prints one JSON line.
    OpenBLAS read ``$OPENBLAS_THREAD_TIMEOUT`` when numpy loaded it, before this runs."""
    import resource

    import numpy as np
    import torch

    import spmmgnn
    from spmmgnn.data.csbm import csbm
    from spmmgnn.training import TrainConfig, Trainer, distribute_graph

    spmmgnn.set_threads(args.threads)
    torch.set_num_threads(args.threads)
    g = csbm(n=args.n, avg_degree=args.degree, num_features=args.features,
             num_classes=args.classes, seed=0)
    data = distribute_graph(g, spmmgnn.ProcessGrid(), "gcn", algorithm="sparse1d")
    cfg = TrainConfig(model="gcn", layers=2, hidden=args.hidden, dropout=0.5, epochs=1,
                      eval_every=0, progress=False, cache_input_aggregation=False)
    trainer = Trainer(data, cfg)
    for e in (1, 2):
        trainer.train_step(e)
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    rows = [trainer.train_step(e) for e in range(3, 3 + args.epochs)]
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / args.epochs
    print(json.dumps(dict(
        step=float(np.median([r["seconds"] for r in rows])),
        parts={k: float(np.median([r["breakdown"][k] for r in rows])) for k in PARTS},
        faults_per_step=faults)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=90_000)
    ap.add_argument("--degree", type=float, default=22.0)
    ap.add_argument("--features", type=int, default=128)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2, help="alternated pairs (default 2)")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--out", default=str(RESULTS / "thread-timeout"))
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    forwarded = [f"--{k}={getattr(args, k)}" for k in
                 ("n", "degree", "features", "classes", "hidden", "epochs", "threads")]
    rows, load_start = [], os.getloadavg()
    for r in range(args.rounds):
        for timeout in ("28", "4"):
            env = dict(os.environ, OPENBLAS_THREAD_TIMEOUT=timeout,
                       SPMMGNN_THREADS=str(args.threads), OMP_NUM_THREADS=str(args.threads))
            proc = subprocess.run([sys.executable, __file__, "--worker", *forwarded], env=env,
                                  capture_output=True, text=True, timeout=3600)
            if proc.returncode != 0:
                raise SystemExit(f"the worker failed:\n{proc.stderr[-3000:]}")
            got = json.loads(proc.stdout.strip().splitlines()[-1])
            got.update(round=r + 1, timeout=timeout, loadavg=os.getloadavg()[0])
            rows.append(got)
            print(f"OPENBLAS_THREAD_TIMEOUT={timeout}: step {got['step'] * 1e3:.1f} ms, "
                  f"dense {got['parts']['dense'] * 1e3:.1f}, spmm_local "
                  f"{got['parts']['spmm_local'] * 1e3:.1f}", flush=True)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    payload = dict(machine=machine(), args=vars(args), rows=rows, loadavg_start=load_start,
                   loadavg_end=os.getloadavg(), when=when)
    write_json(args.out + ".json", payload)
    from spmmgnn.runtime.atomic import write_text_atomic

    cmd = "python bench/thread_timeout.py " + " ".join(sys.argv[1:])
    md = [f"# OpenBLAS's idle-thread spin and the training step ({when})", "",
          f"`{cmd.strip()}` on {len(os.sched_getaffinity(0))} cores; 1 rank x "
          f"{args.threads} threads; CSBM n={args.n}, degree {args.degree}, {args.features} "
          f"features, {args.classes} classes, hidden {args.hidden}; median of {args.epochs} "
          f"steps after 2; 1-minute load average {load_start[0]:.1f} at the start, "
          f"{os.getloadavg()[0]:.1f} at the end.", "",
          "| round | `OPENBLAS_THREAD_TIMEOUT` | step ms | spmm_local | dense | other | "
          "page faults per step |", "|---:|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        p = r["parts"]
        md.append(f"| {r['round']} | {r['timeout']} | {r['step'] * 1e3:.1f} | "
                  f"{p['spmm_local'] * 1e3:.1f} | {p['dense'] * 1e3:.1f} | "
                  f"{p['other'] * 1e3:.1f} | {r['faults_per_step']:.0f} |")
    write_text_atomic(Path(args.out + ".md"), "\n".join(md) + "\n")
    print(f"wrote {args.out}.md")


if __name__ == "__main__":
    main()
