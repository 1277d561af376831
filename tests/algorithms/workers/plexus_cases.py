"""MPI worker: plexus3d against scipy, and its bytes against the volume model.

Usage: mpiexec -n P python plexus_cases.py OUT.json SHAPE [SHAPE ...]   (SHAPE like 2x2x2)
The cases of ``grid_cases.py`` (non-symmetric A, part vectors, uneven and empty parts, a
rectangular A, n not divisible by P), float64 (f = 5) and float32 (f = 16); rank 0 records
the errors against scipy, each rank's bytes (total, algorithm, convert) of one ``matmul`` and
one ``matmul_t`` and, for square A, the volume model's.
"""

from __future__ import annotations

import json
import sys

import numpy as np
from grid_cases import cases
from mpi4py import MPI

import spmmgnn
from spmmgnn.benchmark.volumes import Layout, predict
from spmmgnn.grid import parse_grid

comm = MPI.COMM_WORLD
P = comm.size


def one_call(op, call, v) -> tuple[np.ndarray, dict]:
    op.reset_stats()
    got = call(v)
    s = op.comm_stats()
    return got, dict(sent=s["bytes_sent"], received=s["bytes_received"],
                     **{f"{k}_sent": b for k, b in s["bytes_sent_by_phase"].items()})


def main(path: str, shapes: list[str]) -> None:
    rows = []
    for text in shapes:
        shape = parse_grid(text)
        grid = spmmgnn.ProcessGrid(comm, shape=shape)
        for name, A, part, col_part in cases():
            op = spmmgnn.DistSpMM.from_scipy(A if comm.rank == 0 else None, grid,
                                             algorithm="plexus3d", partition=part,
                                             col_partition=col_part)
            for dtype, f in (("float64", 5), ("float32", 16)):
                rng = np.random.default_rng(f)
                X = rng.standard_normal((A.shape[1], f)).astype(dtype)
                Y = rng.standard_normal((A.shape[0], f)).astype(dtype)
                x, y = op.scatter_rows(X), op.scatter_rows(Y, side="output")
                z, fwd = one_call(op, op.matmul, x)
                t, bwd = one_call(op, op.matmul_t, y)
                z, t = op.gather_rows(z), op.gather_rows(t, side="input")
                ranks = comm.gather(dict(fwd=fwd, bwd=bwd, nnz=op.local_nnz()), root=0)
                if comm.rank == 0:
                    model = None
                    if A.shape[0] == A.shape[1]:
                        v = predict("plexus3d", Layout.build(A, part, P), P, 1, f,
                                    np.dtype(dtype).itemsize, shape=shape)
                        model = dict(sent=v.sent.tolist(), sent_t=v.sent_t.tolist(),
                                     received=v.received.tolist(),
                                     received_t=v.received_t.tolist(), nnz=v.nnz.tolist())
                    zref, tref = A @ X.astype(np.float64), A.T @ Y.astype(np.float64)
                    rows.append(dict(
                        shape=list(shape), case=name, dtype=dtype, nnz=int(A.nnz), m=A.shape[0],
                        n=A.shape[1],
                        err=float(np.abs(z - zref).max() / max(np.abs(zref).max(), 1e-300)),
                        err_t=float(np.abs(t - tref).max() / max(np.abs(tref).max(), 1e-300)),
                        ranks=ranks, model=model))
    if comm.rank == 0:
        with open(path, "w") as fh:
            json.dump(rows, fh)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
