"""Per-call cost of the agreement in ``DistSpMM.check_local`` (one MAX ``Allreduce`` of a
small probe per ``matmul``): ``op.check_local`` alone, and ``op.matmul`` with
``validate=True`` minus ``validate=False``, on a tiny matrix (64 rows, 4 columns) where the
agreement is a large share of the call. Run under mpiexec; ``--label`` names the code
measured (an A/B run sets PYTHONPATH to the other tree) and the row is appended to
``bench/results/agreement.json``; ``--markdown`` writes ``agreement.md`` from that file.

    flock /tmp/spmmgnn-bench.lock mpiexec -n 2 python bench/agreement.py --label after
    python bench/agreement.py --markdown
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

sys.path.append(str(Path(__file__).resolve().parents[1]))  # PYTHONPATH may name another tree

from bench.common import RESULTS, machine  # noqa: E402

OUT = RESULTS / "agreement.json"


def per_call(fn, calls: int, reps: int) -> float:
    """Smallest mean seconds per call over ``reps`` rounds of ``calls`` calls."""
    from mpi4py import MPI

    best = float("inf")
    for _ in range(reps):
        MPI.COMM_WORLD.Barrier()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls)
    return MPI.COMM_WORLD.allreduce(best, op=MPI.MAX)


def measure(algorithm: str, calls: int, reps: int) -> dict:
    from mpi4py import MPI

    import spmmgnn

    comm = MPI.COMM_WORLD
    A = sp.random(64, 64, density=0.1, random_state=1, format="csr") + sp.eye(64)
    ops = {v: spmmgnn.DistSpMM.from_scipy(A if comm.rank == 0 else None, algorithm=algorithm,
                                          validate=v) for v in (True, False)}
    x = np.ones((ops[True].n_local_in, 4))
    for op in ops.values():
        for _ in range(200):
            op.matmul(x)
    rows = ops[True].n_local_in
    check = per_call(lambda: ops[True].check_local(x, "matmul", rows), calls, reps)
    checked = per_call(lambda: ops[True].matmul(x), calls, reps)
    unchecked = per_call(lambda: ops[False].matmul(x), calls, reps)
    return dict(algorithm=algorithm, check_local_us=check * 1e6, matmul_us=checked * 1e6,
                matmul_unchecked_us=unchecked * 1e6, agreement_us=(checked - unchecked) * 1e6)


def markdown(rows: list[dict]) -> str:
    lines = ["# Per-call cost of the agreement in `DistSpMM.check_local`", "",
             "`flock /tmp/spmmgnn-bench.lock mpiexec -n 2 python bench/agreement.py --label "
             "LABEL` (`before`: the tree before issue 41, via PYTHONPATH; `after`: this "
             "one), alternated; 64 x 64 matrix, 4 columns, P = 2, one thread per rank; the "
             "smallest mean per call over the rounds, slowest rank. Noisy: the machine is "
             "shared (load in each row).", "",
             "| label | algorithm | check_local (us) | matmul (us) | matmul, validate=False "
             "(us) | load |", "| --- | --- | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['label']} | {r['algorithm']} | {r['check_local_us']:.1f} | "
                     f"{r['matmul_us']:.1f} | {r['matmul_unchecked_us']:.1f} | "
                     f"{r['load']:.2f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--label", default="after")
    ap.add_argument("--algorithm", nargs="+", default=["sparse1d", "oblivious1d"])
    ap.add_argument("--calls", type=int, default=5000)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    if args.markdown:
        rows = json.loads(OUT.read_text())["rows"]
        (RESULTS / "agreement.md").write_text(markdown(rows))
        return
    os.environ.setdefault("SPMMGNN_THREADS", "1")
    from mpi4py import MPI

    rows = [dict(measure(a, args.calls, args.reps), label=args.label,
                 load=os.getloadavg()[0]) for a in args.algorithm]
    if MPI.COMM_WORLD.rank == 0:
        old = json.loads(OUT.read_text())["rows"] if OUT.exists() else []
        OUT.write_text(json.dumps(dict(machine=machine(), rows=old + rows), indent=1))
        for r in rows:
            print(json.dumps(r))


if __name__ == "__main__":
    main()
