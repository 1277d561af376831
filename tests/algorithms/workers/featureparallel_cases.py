"""MPI worker: featureparallel against scipy, with its bytes, and its memory refusal.

Usage: mpiexec -n P python featureparallel_cases.py OUT.json
Cases: non-symmetric square A with near-equal blocks, uneven block sizes with an empty block,
and a rectangular A; feature widths 7 and 2 (fewer columns than ranks at P = 3, 4) in float64,
and 5 in float32. Rank 0 writes the results and each rank's bytes per direction.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import scipy.sparse as sp
from layout_cases import cases
from mpi4py import MPI

import spmmgnn

comm = MPI.COMM_WORLD
P = comm.size


def run(A, sizes, f: int, dtype) -> dict:
    op = spmmgnn.DistSpMM.from_scipy(A if comm.rank == 0 else None, algorithm="featureparallel",
                                     partition=sizes)
    X = np.random.default_rng(1).standard_normal((A.shape[1], f)).astype(dtype)
    Y = np.random.default_rng(2).standard_normal((A.shape[0], f)).astype(dtype)
    z = op.gather_rows(op.matmul(op.scatter_rows(X if comm.rank == 0 else None)))
    fwd = op.comm_stats()
    op.reset_stats()
    y_local = op.scatter_rows(Y if comm.rank == 0 else None, side="output")
    t = op.gather_rows(op.matmul_t(y_local), side="input")
    bwd = op.comm_stats()
    ranks = comm.gather(dict(fwd=[fwd["bytes_sent"], fwd["bytes_received"]],
                             bwd=[bwd["bytes_sent"], bwd["bytes_received"]]), root=0)
    if comm.rank != 0:
        return {}
    return dict(z=z.tolist(), t=t.tolist(), ranks=ranks, row_offsets=op.row_offsets.tolist(),
                col_offsets=op.col_offsets.tolist(), f=f, itemsize=np.dtype(dtype).itemsize)


def refusal() -> list[str]:
    """A memory budget below the estimate: every rank must get the same error."""
    A = sp.random(50, 50, density=0.2, random_state=4, format="csr")
    try:
        spmmgnn.DistSpMM.from_scipy(A if comm.rank == 0 else None, algorithm="featureparallel",
                                    memory_budget=1000)
    except spmmgnn.SpmmgnnError as exc:
        return comm.gather(f"{exc.collective}: {exc}", root=0)
    return comm.gather("no error", root=0)


def main() -> None:
    out = []
    for name, A, sizes in cases(P):
        for f, dtype in ((7, np.float64), (2, np.float64), (5, np.float32)):
            r = run(A, sizes, f, dtype)
            if comm.rank == 0:
                out.append(dict(case=name, A=A.toarray().tolist(), **r))
    errors = refusal()
    if comm.rank == 0:
        with open(sys.argv[1], "w") as fh:
            json.dump(dict(runs=out, refusal=errors), fh)


if __name__ == "__main__":
    main()
