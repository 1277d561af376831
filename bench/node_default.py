"""Is ``spmmgnn train``'s default exchange on one node (``node``, rows read in place: issue 48)
faster than ``flat`` on graphs other than the CSBM it was measured on?

For each graph, P ranks x 1 thread (P: the cores this process may run on, or ``--ranks``), the
command a user runs, ``mpiexec -n P spmmgnn train --dataset FILE --no-cache --eval-every 0
--quiet --json OUT`` with ``--exchange flat``, ``--exchange node`` and no ``--exchange`` (the
default), in alternating rounds; the median epoch after the first two, per run. Graphs (the
locality a partitioner finds decides how many rows cross ranks):

- ``csbm``: the CSBM of the issue's shape, contiguous blocks (no locality: every rank needs
  most others' rows);
- ``rmat``: R-MAT (power-law degrees), randomly relabelled, contiguous blocks;
- ``rmat-metis``: the same graph partitioned by METIS;
- ``sbm-metis``: a stochastic block model with 10 % of its edges between communities,
  partitioned by METIS (few rows cross ranks).

The non-CSBM graphs get random features and labels (this measures time, not accuracy). Writes
``bench/results/node-default.{json,md}`` with the load at start and end.

    python -m bench.node_default                 # ~100k-vertex graphs
    python -m bench.node_default --scale 0.2     # smaller, a few minutes
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import RESULTS
from spmmgnn.benchmark.harness import machine, run_mpi, spmmgnn_command
from spmmgnn.benchmark.tables import md_table, publish

GRAPHS = ("csbm", "rmat", "rmat-metis", "sbm-metis")
EXCHANGES = ("flat", "node", "default")


def write_graph(name: str, n: int, features: int, parts: int, path: Path) -> None:
    """A graph of about ``n`` vertices with random features and labels, partitioned into
    ``parts`` block rows, as the project's HDF5 file (``spmmgnn train --dataset``)."""
    from spmmgnn.data.csbm import csbm
    from spmmgnn.data.generators import rmat, sbm
    from spmmgnn.data.graph import Graph
    from spmmgnn.data.partitioned import write_partitioned

    if name == "csbm":
        g = csbm(n=n, avg_degree=16.0, num_features=features, num_classes=8, seed=0)
    else:
        adj = (rmat(int(round(np.log2(n))), edge_factor=8, seed=0) if name.startswith("rmat")
               else sbm(n, communities=max(2, n // 500), avg_degree=16.0, mixing=0.1, seed=0))
        rng = np.random.default_rng(0)
        m = adj.shape[0]
        g = Graph(adj, features=rng.standard_normal((m, features), dtype=np.float32),
                  labels=rng.integers(0, 8, m), num_classes=8, name=name)
    method = "metis" if name.endswith("metis") else "none"
    write_partitioned(g, path, parts, method, seed=0)


def train(path: Path, P: int, exchange: str, hidden: int, epochs: int) -> dict:
    """One ``spmmgnn train`` run; its median epoch after the first two and what it ran."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run.json"
        cmd = [*spmmgnn_command(), "train", "--dataset", str(path), "--no-cache", "--hidden",
               str(hidden), "--epochs", str(epochs), "--eval-every", "0", "--threads", "1",
               "--quiet", "--json", str(out)]
        if exchange != "default":
            cmd += ["--exchange", exchange]
        run_mpi(P, cmd, timeout=3600)
        s = json.loads(out.read_text())
    seconds = [r["wall_seconds"] for r in s["history"]][2:]
    ranks = s["ranks"]
    return dict(epoch_ms=1e3 * float(np.median(seconds)), exchange=s["exchange"]["option"],
                intra_mb=sum(r["bytes_sent_by_tier"]["intra"] for r in ranks) / 1e6 / epochs,
                shared_read_mb=sum(r["bytes_shared_read"] for r in ranks) / 1e6 / epochs,
                nnz=s["nnz"], n=s["n"])


def paired(rounds: list[dict], a: str, b: str) -> tuple[float, float, str]:
    """Over alternating rounds of runs keyed ``a`` and ``b``: their median epochs (ms) and
    ``b / a`` as "median (min-max)"."""
    med = [float(np.median([r[key]["epoch_ms"] for r in rounds])) for key in (a, b)]
    ratios = [r[b]["epoch_ms"] / r[a]["epoch_ms"] for r in rounds]
    return (*med, f"{np.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})")


def render(payload: dict) -> str:
    a = payload["args"]
    lines = ["# The default exchange of `spmmgnn train` on one node, other graphs\n",
             f"`python -m bench.node_default --scale {a['scale']}`: P = {payload['P']} ranks x "
             f"1 thread, hidden {a['hidden']}, {a['features']} features, {a['epochs']} epochs "
             f"(median after the first two), {a['rounds']} alternating rounds; "
             f"{payload['cpu']}, {payload['machine']['cores']} cores; load "
             f"{payload['load'][0]:.1f} at start, {payload['load'][1]:.1f} at end.\n"]
    rows = []
    for name, g in payload["graphs"].items():
        flat, node, ratio = paired(g["rounds"], "flat", "node")
        default = float(np.median([r["default"]["epoch_ms"] for r in g["rounds"]]))
        ran = "/".join(sorted({r["default"]["exchange"] for r in g["rounds"]}))
        first = g["rounds"][0]
        rows.append([name, f"{first['flat']['n']:,}", f"{first['flat']['nnz']:,}",
                     f"{flat:.1f}", f"{node:.1f}", f"{default:.1f} ({ran})", ratio,
                     f"{first['flat']['intra_mb']:.1f}", f"{first['node']['shared_read_mb']:.1f}"])
    lines += md_table(["graph", "n", "nnz", "flat ms", "node ms", "default ms (ran)",
                       "node / flat (min-max)", "MB per epoch sent inside the node, flat",
                       "MB read in place, node"], rows, "lrrrrrrrr")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=1.0, help="graph size: 100,000 x scale")
    ap.add_argument("--ranks", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--features", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--graphs", default=",".join(GRAPHS))
    ap.add_argument("--out", default=str(RESULTS / "node-default"))
    args = ap.parse_args()
    n = int(100_000 * args.scale)
    payload = dict(args=vars(args), P=args.ranks, machine=machine(), cpu=machine()["cpu"],
                   graphs={}, load=[os.getloadavg()[0]])
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.graphs.split(","):
            path = Path(tmp) / f"{name}.h5"
            t0 = time.perf_counter()
            write_graph(name, n, args.features, args.ranks, path)
            rounds = []
            for _ in range(args.rounds):
                rounds.append({e: train(path, args.ranks, e, args.hidden, args.epochs)
                               for e in EXCHANGES})
                print(name, {e: round(r["epoch_ms"], 1) for e, r in rounds[-1].items()},
                      flush=True)
            payload["graphs"][name] = dict(rounds=rounds, write_s=time.perf_counter() - t0)
            path.unlink()
    payload["load"].append(os.getloadavg()[0])
    publish(args.out, payload, render)
    print(render(payload))


if __name__ == "__main__":
    main()
