"""OpenBLAS's idle-thread spin against the training step (issue 48): one rank with all the
cores' threads, ``OPENBLAS_THREAD_TIMEOUT`` at OpenBLAS's default (28: its idle threads spin
2^28 cycles, ~0.1 s, after each threaded product) and at the library's (4: they sleep at
once), in alternating processes, each a 2-layer GCN on a CSBM graph (float32, dropout 0.5,
no cached aggregation, ``partitioner none``): the median step and its breakdown over
``--epochs`` steps after 2, and the minor page faults per step.

    python -m bench.thread_timeout                      # 90k vertices, all cores
    python -m bench.thread_timeout --n 1000000 --degree 16 --classes 8   # issue 48's graph

Writes ``bench/results/thread-timeout.{json,md}`` (``--out`` to change the stem).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from bench import RESULTS, ROOT
from spmmgnn.benchmark.harness import machine, now, python_module, run, threads_env
from spmmgnn.benchmark.tables import md_table, publish

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


def render(data: dict) -> str:
    a = data["args"]
    md = [f"# OpenBLAS's idle-thread spin and the training step ({data['when']})", "",
          f"`{data['command']}` on {data['machine']['cores']} cores; 1 rank x "
          f"{a['threads']} threads; CSBM n={a['n']}, degree {a['degree']}, {a['features']} "
          f"features, {a['classes']} classes, hidden {a['hidden']}; median of {a['epochs']} "
          f"steps after 2; 1-minute load average {data['loadavg_start'][0]:.1f} at the start, "
          f"{data['loadavg_end'][0]:.1f} at the end.", ""]
    md += md_table(["round", "`OPENBLAS_THREAD_TIMEOUT`", "step ms", "spmm_local", "dense",
                    "other", "page faults per step"],
                   [[r["round"], r["timeout"], f"{r['step'] * 1e3:.1f}",
                     f"{r['parts']['spmm_local'] * 1e3:.1f}", f"{r['parts']['dense'] * 1e3:.1f}",
                     f"{r['parts']['other'] * 1e3:.1f}", f"{r['faults_per_step']:.0f}"]
                    for r in data["rows"]], "rlrrrrr")
    return "\n".join(md) + "\n"


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
            got = run(python_module("bench.thread_timeout", "--worker", *forwarded),
                      env=dict(threads_env(args.threads), OPENBLAS_THREAD_TIMEOUT=timeout),
                      timeout=3600, cwd=ROOT).last_json()
            got.update(round=r + 1, timeout=timeout, loadavg=os.getloadavg()[0])
            rows.append(got)
            print(f"OPENBLAS_THREAD_TIMEOUT={timeout}: step {got['step'] * 1e3:.1f} ms, "
                  f"dense {got['parts']['dense'] * 1e3:.1f}, spmm_local "
                  f"{got['parts']['spmm_local'] * 1e3:.1f}", flush=True)
    data = dict(command=("python -m bench.thread_timeout " + " ".join(sys.argv[1:])).strip(),
                machine=machine(), args=vars(args), rows=rows, loadavg_start=load_start,
                loadavg_end=os.getloadavg(), when=now())
    publish(args.out, data, render)
    print(f"wrote {args.out}.md")


if __name__ == "__main__":
    main()
