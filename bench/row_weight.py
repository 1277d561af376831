"""Rows and non-zeros: what ``--row-weight`` changes in a partition and in the epoch.

A partitioner balances each block row's non-zeros (the SpMM's compute load). A training
step's dense part (products, ReLU, dropout, loss) costs per row, so on a power-law graph,
whose low-degree vertices weigh almost nothing, one block row can hold several times the
average rows and the step waits for it. ``partition(row_weight=W)`` weighs each vertex
``nnz + W`` instead.

Two parts:

1. **Partitions only** (any machine, no training): for R-MAT 2^``--scale-log`` and a CSBM
   of as many vertices, k = 2, 8, 16, 64 (``--ks``) and ``--methods``, W = 0 and ``--weight``: the
   largest block row's rows and non-zeros over the average, the total and maximum send
   volume.
2. **Training** at P = ``--ranks`` x 1 thread: ``mpiexec -n P spmmgnn train --dataset FILE``
   on the file ``spmmgnn partition --method metis-vol [--row-weight W]`` writes (random
   features, hidden ``--hidden``, ``--no-cache``), W = 0 and ``--weight`` in alternating
   rounds; the median epoch after the first two.

Writes ``bench/results/row-weight.{json,md}`` (``--out`` to change the stem).

    python -m bench.row_weight                      # R-MAT 2^17 and a CSBM, P = cores
    python -m bench.row_weight --scale-log 14 --rounds 1   # a minute
    python -m bench.row_weight --ranks 16 --ks 16 --methods metis-vol --graphs rmat  # 16 cores
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import RESULTS
from bench.node_default import paired, train
from spmmgnn.benchmark.harness import machine
from spmmgnn.benchmark.tables import md_table, publish

KS = "2,8,16,64"


def make_graph(name: str, log_n: int, features: int):
    """R-MAT (power law) or CSBM (near-regular degrees) with random features and labels."""
    from spmmgnn.data.csbm import csbm
    from spmmgnn.data.generators import rmat
    from spmmgnn.data.graph import Graph

    if name == "csbm":
        return csbm(n=2 ** log_n, avg_degree=16.0, num_features=features, num_classes=8,
                    seed=0)
    adj = rmat(log_n, edge_factor=8, seed=0)
    rng = np.random.default_rng(0)
    m = adj.shape[0]
    return Graph(adj, features=rng.standard_normal((m, features), dtype=np.float32),
                 labels=rng.integers(0, 8, m), num_classes=8, name=name)


def partition_row(g, k: int, method: str, weight: int) -> dict:
    from spmmgnn.partitioners import partition

    p = partition(g.adj, k, method=method, seed=0, row_weight=weight)
    m = p.metrics
    return dict(k=k, method=method, weight=weight, rows=1 + m.rows_imbalance,
                nnz=1 + m.load_imbalance, total=int(m.total_volume), max_send=m.max_send,
                seconds=p.seconds)


def render(payload: dict) -> str:
    a = payload["args"]
    lines = ["# Rows and non-zeros: `--row-weight` in the partition and the epoch\n",
             f"`python -m bench.row_weight {payload['argv']}`".replace(" `", "`")
             + f" on {payload['cpu']}, {payload['machine']['cores']} cores; load "
             f"{payload['load'][0]:.1f} at start, {payload['load'][1]:.1f} at end.\n",
             "## Partitions\n",
             "Largest block row over the average, of its rows and of its non-zeros; total and "
             "maximum send volume (rows per SpMM).\n"]
    lines += md_table(["graph", "k", "method", "W", "rows max / avg", "nnz max / avg",
                       "total volume", "max send", "seconds"],
                      [[name, r["k"], r["method"], r["weight"], f"{r['rows']:.2f}",
                        f"{r['nnz']:.2f}", f"{r['total']:,}", f"{r['max_send']:,}",
                        f"{r['seconds']:.1f}"]
                       for name, g in payload["graphs"].items() for r in g["partitions"]],
                      "lrlrrrrrr")
    lines += ["", f"## Training at P = {payload['P']} x 1 thread\n",
              f"`mpiexec -n {payload['P']} spmmgnn train --dataset FILE --no-cache --hidden "
              f"{a['hidden']} --epochs {a['epochs']} --eval-every 0 --threads 1` on the file "
              "of `spmmgnn partition --method metis-vol [--row-weight W]`; "
              f"{a['features']} random features; median epoch after the first two, "
              f"{a['rounds']} alternating rounds.\n"]
    w = a["weight"]
    rows = []
    for name, g in payload["graphs"].items():
        if not g.get("rounds"):
            continue
        plain, weighed, ratio = paired(g["rounds"], "0", str(w))
        rows.append([name, f"{g['train_rows']['0']:.2f}", w, f"{g['train_rows'][str(w)]:.2f}",
                     f"{plain:.1f}", f"{weighed:.1f}", ratio])
    lines += md_table(["graph", "rows max / avg, W = 0", "W", "rows max / avg", "ms, W = 0",
                       "ms, W", "W / 0 (min-max)"], rows, "lrrrrrr")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale-log", type=int, default=17, help="2^S vertices")
    ap.add_argument("--weight", type=int, default=16, help="the row weight against 0")
    ap.add_argument("--methods", default="metis-vol,default")
    ap.add_argument("--ks", default=KS, help="the parts of the partition table")
    ap.add_argument("--ranks", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--features", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--graphs", default="rmat,csbm")
    ap.add_argument("--out", default=str(RESULTS / "row-weight"))
    args = ap.parse_args()
    from spmmgnn.data.partitioned import write_partitioned

    payload = dict(args=vars(args), argv=" ".join(sys.argv[1:]), P=args.ranks,
                   machine=machine(), cpu=machine()["cpu"], graphs={},
                   load=[os.getloadavg()[0]])
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.graphs.split(","):
            g = make_graph(name, args.scale_log, args.features)
            parts = [partition_row(g, int(k), method, w) for k in args.ks.split(",")
                     for method in args.methods.split(",") for w in (0, args.weight)]
            for r in parts:
                print(name, r, flush=True)
            entry = payload["graphs"][name] = dict(partitions=parts)
            if args.ranks < 2 or args.rounds < 1:
                continue
            files, rows = {}, {}
            for w in (0, args.weight):
                files[w] = Path(tmp) / f"{name}-{w}.h5"
                p = write_partitioned(g, files[w], args.ranks, "metis-vol", seed=0,
                                      **({"row_weight": w} if w else {}))
                rows[str(w)] = 1 + p.metrics.rows_imbalance
            rounds = []
            t0 = time.perf_counter()
            for _ in range(args.rounds):
                rounds.append({str(w): train(files[w], args.ranks, "default", args.hidden,
                                             args.epochs) for w in (0, args.weight)})
                print(name, {w: round(r["epoch_ms"], 1) for w, r in rounds[-1].items()},
                      flush=True)
            entry.update(rounds=rounds, train_rows=rows, seconds=time.perf_counter() - t0)
    payload["load"].append(os.getloadavg()[0])
    publish(args.out, payload, render)
    print(render(payload))


if __name__ == "__main__":
    main()
