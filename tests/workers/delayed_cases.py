"""MPI worker: delayed remote aggregates (DistGNN cd-r, 0c) on sparse1d, call by call.

Usage: mpiexec -n P python delayed_cases.py OUT.json
For a non-symmetric A with uneven blocks (one empty when P > 2), six calls of one layer's view with
staleness R in {0, 2} and with drop; each call t multiplies fresh X_t (and Y_t for the
transpose). Rank 0 writes A, the layout and the gathered results per mode.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

import spmmgnn
from spmmgnn.algorithms.delayed import DelayedRemote

comm = MPI.COMM_WORLD
P = comm.size
F, CALLS = 3, 6


def main() -> None:
    sizes = np.random.default_rng(P).integers(4, 12, P)
    if P > 2:
        sizes[1] = 0  # an empty block
    n = int(sizes.sum())
    A = sp.random(n, n, density=0.3, random_state=7, format="csr")
    out = dict(A=A.toarray().tolist(), modes={})
    for mode, R, drop in (("exact", 0, False), ("stale2", 2, False), ("drop", 0, True)):
        op = spmmgnn.DistSpMM.from_scipy(A if comm.rank == 0 else None, algorithm="sparse1d",
                                         partition=sizes.tolist())
        view = DelayedRemote(op, R, drop).views(2)[1]
        zs, ts = [], []
        for t in range(CALLS):
            X = np.random.default_rng(100 + t).standard_normal((n, F))
            Y = np.random.default_rng(200 + t).standard_normal((n, F))
            zs.append(op.gather_rows(view.matmul(op.scatter_rows(X if comm.rank == 0 else None))))
            y = op.scatter_rows(Y if comm.rank == 0 else None, side="output")
            ts.append(op.gather_rows(view.matmul_t(y), side="input"))
        view.drain()
        if comm.rank == 0:
            out["offsets"] = op.row_offsets.tolist()
            out["modes"][mode] = dict(z=[z.tolist() for z in zs], t=[t.tolist() for t in ts])
    if comm.rank == 0:
        with open(sys.argv[1], "w") as fh:
            json.dump(out, fh)


if __name__ == "__main__":
    main()
