"""MPI worker: prepost1d against scipy and against sparse1d, with and without codecs.

Usage: mpiexec -n P python prepost_cases.py OUT.json
Cases: non-symmetric square A with near-equal blocks, uneven block sizes with an empty
block, and a rectangular A. Rank 0 writes errors, bytes and each rank's rows per sender.
"""

from __future__ import annotations

import json
import sys

import numpy as np
from layout_cases import cases
from mpi4py import MPI

import spmmgnn
from spmmgnn.local.codecs import CODECS

comm = MPI.COMM_WORLD
P = comm.size
F = 6


def run(A, sizes, algorithm: str, codec: str | None) -> dict:
    options = {} if codec is None else dict(codec=codec, codec_seed=5)
    op = spmmgnn.DistSpMM.from_scipy(A if comm.rank == 0 else None, algorithm=algorithm,
                                     partition=sizes, **options)
    X = np.random.default_rng(1).standard_normal((A.shape[1], F))
    Y = np.random.default_rng(2).standard_normal((A.shape[0], F))
    z = op.gather_rows(op.matmul(op.scatter_rows(X if comm.rank == 0 else None), stream=7))
    fwd = op.comm_stats()
    op.reset_stats()
    y_local = op.scatter_rows(Y if comm.rank == 0 else None, side="output")
    t = op.gather_rows(op.matmul_t(y_local, stream=7), side="input")
    bwd = op.comm_stats()
    ranks = comm.gather(dict(
        fwd=[fwd["bytes_sent"], fwd["bytes_received"]],
        bwd=[bwd["bytes_sent"], bwd["bytes_received"]],
        rows_from=getattr(op, "recv_rows_from", np.zeros(0)).tolist()), root=0)
    if comm.rank != 0:
        return {}
    return dict(z=z.tolist(), t=t.tolist(), ranks=ranks, row_offsets=op.row_offsets.tolist(),
                col_offsets=op.col_offsets.tolist())


def main() -> None:
    out = []
    for name, A, sizes in cases(P):
        for codec in [None, *CODECS]:
            r = {a: run(A, sizes, a, codec) for a in ("sparse1d", "prepost1d")}
            if comm.rank == 0:
                out.append(dict(case=name, codec=codec, A=A.toarray().tolist(), **r))
    if comm.rank == 0:
        with open(sys.argv[1], "w") as fh:
            json.dump(out, fh)


if __name__ == "__main__":
    main()
