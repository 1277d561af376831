"""MPI worker: sparse algorithms with every codec; results, bytes and the error bound.

Usage: mpiexec -n P python codec_cases.py OUT.json ALGORITHM C   (C: c, or a grid such as 2x2)
"""

from __future__ import annotations

import json
import sys

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

import spmmgnn
from spmmgnn.grid import parse_grid
from spmmgnn.local.codecs import CODECS
from spmmgnn.partitioners import metrics

comm = MPI.COMM_WORLD


def main() -> None:
    path, algo, c = sys.argv[1], sys.argv[2], sys.argv[3]
    grid = (spmmgnn.ProcessGrid(comm, shape=parse_grid(c)) if "x" in c else
            spmmgnn.ProcessGrid(comm, replication=int(c)))
    n, f = 61, 40
    A = sp.random(n, n, density=0.1, random_state=4, format="csr")
    X = np.random.default_rng(0).standard_normal((n, f)).astype(np.float32)
    X[5] = 0.25  # a constant row travels exactly
    out = []
    for name in CODECS:
        op = spmmgnn.DistSpMM.from_scipy(A if comm.rank == 0 else None, grid, algorithm=algo,
                                         codec=name, codec_seed=3)
        x = op.scatter_rows(X if comm.rank == 0 else None)
        op.reset_stats()
        y = op.gather_rows(op.matmul(x))
        fwd = op.comm_stats()
        op.reset_stats()
        t = op.gather_rows(op.matmul_t(x))
        bwd = op.comm_stats()
        stats = comm.gather(dict(fwd=fwd, bwd=bwd, block=grid.block_row), root=0)
        if comm.rank == 0:
            k = grid.n_block_rows
            m = metrics(A, op.partition.parts, k)
            out.append(dict(codec=name, y=y.tolist(), t=t.tolist(), ranks=stats,
                            send=m.send_volume.tolist(), recv=m.recv_volume.tolist()))
    if comm.rank == 0:
        with open(path, "w") as fh:
            json.dump(dict(A=A.toarray().tolist(), X=X.tolist(), results=out,
                           offsets=op.row_offsets.tolist()), fh)


if __name__ == "__main__":
    main()
