"""Per-call time of the node-aware exchange with its intra-node legs through the shared
window against the same legs as messages (issue 48), ``NodePlan(shared=True/False)``.

    mpiexec -n 4 python bench/shared_exchange.py --ranks-per-node 2 [--n 400000 --f 64]

Each rank owns n / P rows and needs a random 15 % of the others' rows (fixed seed); best of
``--repeat`` interleaved calls, the slowest rank's time, bcast (``A X``) and reduce
(``A^T Y``). Rank 0 appends one row to ``bench/results/shared-exchange.md`` with the load.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
from mpi4py import MPI

import spmmgnn
from spmmgnn.exchange.node_exchange import NodePlan

OUT = Path(__file__).parent / "results" / "shared-exchange.md"
HEAD = ("# Node-aware exchange: intra-node legs through shared memory vs messages\n\n"
        "`mpiexec -n P python bench/shared_exchange.py --ranks-per-node K`: best of the "
        "interleaved calls, slowest rank, ms; the 1-minute load average when it ran.\n\n"
        "| P | K | rows/rank | ghosts/rank | f | window bcast | messages bcast | window reduce "
        "| messages reduce | load |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks-per-node", type=int, default=2)
    ap.add_argument("--n", type=int, default=400_000)
    ap.add_argument("--f", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    P, me = comm.size, comm.rank
    offsets = np.linspace(0, args.n, P + 1).astype(np.int64)
    lo, hi = offsets[me], offsets[me + 1]
    pick = np.random.default_rng(me).random(args.n) < 0.15
    pick[lo:hi] = False
    ghost_ids = np.flatnonzero(pick)
    grid = spmmgnn.ProcessGrid(comm, ranks_per_node=args.ranks_per_node)
    plans = {s: NodePlan(comm, offsets, ghost_ids, nodes=grid.node_map(comm), shared=s)
             for s in (True, False)}
    x = np.random.default_rng(1).standard_normal((hi - lo, args.f)).astype(np.float32)
    ghost = np.empty((ghost_ids.size, args.f), np.float32)
    out = np.zeros((hi - lo, args.f), np.float32)
    best = {(s, d): np.inf for s in (True, False) for d in ("bcast", "reduce")}
    for _ in range(args.repeat):
        for s, plan in plans.items():
            for d in ("bcast", "reduce"):
                comm.Barrier()
                t0 = time.perf_counter()
                if d == "bcast":
                    plan.bcast(x, ghost)
                else:
                    plan.reduce(ghost, out)
                t = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
                best[s, d] = min(best[s, d], t)
    if me == 0:
        ms = {k: v * 1e3 for k, v in best.items()}
        row = (f"| {P} | {args.ranks_per_node} | {hi - lo} | {ghost_ids.size} | {args.f} | "
               f"{ms[True, 'bcast']:.2f} | {ms[False, 'bcast']:.2f} | {ms[True, 'reduce']:.2f} "
               f"| {ms[False, 'reduce']:.2f} | {os.getloadavg()[0]:.1f} |\n")
        text = OUT.read_text() if OUT.exists() else HEAD
        OUT.write_text(text + row)
        print(row, end="")


if __name__ == "__main__":
    main()
