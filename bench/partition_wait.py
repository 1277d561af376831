"""Rank 0 partitions while the other ranks wait (issue 39): the partition's seconds inside an
mpiexec run of P ranks against alone, and the CPU seconds the waiting ranks burn, for this
tree and for a baseline (other code, e.g. main's unpacked by ``git archive``).

    python bench/partition_wait.py --baseline /tmp/spmmgnn-main --P 1 2 4

The waiting is ``errors.check_on_root``, the step ``train --partitioner`` and the commands
run the partition in; the work is a fixed-work method (``metis-vol+multilevel``, no time
rule) on an R-MAT graph. Writes bench/results/partition_wait.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

WORKER = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
from mpi4py import MPI
from spmmgnn.data.generators import rmat
from spmmgnn.runtime.errors import check_on_root
from spmmgnn.partitioners import partition
comm = MPI.COMM_WORLD
A = rmat(int(sys.argv[2]), 8, seed=1) if comm.rank == 0 else None
if comm.rank == 0:
    partition(rmat(8, 4, seed=0), 2, method=sys.argv[4])  # numba caches, METIS
comm.Barrier()
cpu0 = resource.getrusage(resource.RUSAGE_SELF)
t0 = time.perf_counter()
secs = check_on_root(comm, 0, lambda: partition(A, int(sys.argv[3]), method=sys.argv[4]).seconds)
wall = time.perf_counter() - t0
cpu1 = resource.getrusage(resource.RUSAGE_SELF)
cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
got = comm.gather(dict(rank=comm.rank, wall=wall, cpu=cpu), root=0)
if comm.rank == 0:
    print(json.dumps(dict(partition_seconds=secs, ranks=got)))
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", required=True, help="root of the other spmmgnn tree")
    ap.add_argument("--P", nargs="+", type=int, default=[1, 2, 4])
    ap.add_argument("--scale", type=int, default=15)
    ap.add_argument("--k", type=int, default=16)
    ap.add_argument("--method", default="metis-vol+multilevel")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "partition_wait"))
    args = ap.parse_args(argv)
    mpiexec = str(Path(sys.executable).parent / "mpiexec")
    env = dict(os.environ, SPMMGNN_THREADS="1", OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    rows = []
    for P in args.P:
        for name, code in (("this tree", str(ROOT)), ("baseline", args.baseline)):
            out = subprocess.run([mpiexec, "-n", str(P), sys.executable, "-c", WORKER, code,
                                  str(args.scale), str(args.k), args.method],
                                 capture_output=True, text=True, env=env, check=True)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            waiting = [x["cpu"] / x["wall"] for x in r["ranks"] if x["rank"] != 0]
            rows.append(dict(code=name, P=P, partition_seconds=r["partition_seconds"],
                             waiting_cpu_share=max(waiting, default=0.0),
                             load=os.getloadavg()[0]))
            print(json.dumps(rows[-1]), flush=True)
    alone = {r["code"]: r["partition_seconds"] for r in rows if r["P"] == 1}
    lines = ["# Rank 0 partitions while the others wait", "",
             f"`python bench/partition_wait.py --P {' '.join(map(str, args.P))}`: "
             f"{args.method}, R-MAT scale {args.scale}, k = {args.k}, one thread per rank, "
             "2 cores. 'waiting CPU' is the busiest waiting rank's CPU seconds per wall "
             "second (1.0 = a core spinning). The baseline is the code before issue 39 "
             "(blocking collectives).", "",
             "| code | P | partition seconds | / alone | waiting CPU | load |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['code']} | {r['P']} | {r['partition_seconds']:.2f} | "
                     f"{r['partition_seconds'] / alone.get(r['code'], float('nan')):.2f} | "
                     f"{r['waiting_cpu_share']:.2f} | {r['load']:.1f} |")
    Path(args.out).with_suffix(".json").write_text(json.dumps(dict(rows=rows), indent=1))
    Path(args.out).with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
