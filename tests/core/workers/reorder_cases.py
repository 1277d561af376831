"""MPI worker: reorder="rcm" against scipy and against the same operator without it.

Usage: mpiexec -n P python reorder_cases.py OUT.json
A non-symmetric, randomly numbered 2-D grid graph with uneven blocks; both operators multiply
the same X and Y. Rank 0 writes the results, each rank's bytes and row ids for both.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

import spmmgnn

comm = MPI.COMM_WORLD
P = comm.size


def grid_graph(side: int) -> sp.csr_array:
    """Directed 2-D grid (right and down neighbours, distinct weights), randomly numbered."""
    n = side * side
    ids = np.arange(n).reshape(side, side)
    src = np.concatenate([ids[:, :-1].ravel(), ids[:-1, :].ravel()])
    dst = np.concatenate([ids[:, 1:].ravel(), ids[1:, :].ravel()])
    w = np.arange(1, src.size + 1, dtype=np.float64)
    A = sp.csr_array((w, (dst, src)), shape=(n, n))
    perm = np.random.default_rng(0).permutation(n)
    return sp.csr_array(A[perm][:, perm])


def main() -> None:
    A = grid_graph(12)
    n = A.shape[0]
    sizes = np.random.default_rng(P).multinomial(n, np.ones(P) / P).tolist()
    X = np.random.default_rng(1).standard_normal((n, 4))
    Y = np.random.default_rng(2).standard_normal((n, 4))
    out = dict(A=[A.data.tolist(), A.indices.tolist(), A.indptr.tolist()], runs={})
    for reorder in (None, "rcm"):
        op = spmmgnn.DistSpMM.from_scipy(A if comm.rank == 0 else None, partition=sizes,
                                         reorder=reorder)
        z = op.gather_rows(op.matmul(op.scatter_rows(X if comm.rank == 0 else None)))
        t = op.gather_rows(op.matmul_t(op.scatter_rows(Y if comm.rank == 0 else None,
                                                       side="output")), side="input")
        st = op.comm_stats()
        ranks = comm.gather(dict(sent=st["bytes_sent"], received=st["bytes_received"],
                                 ids=op.row_ids().tolist()), root=0)
        if comm.rank == 0:
            out["runs"][str(reorder)] = dict(z=z.tolist(), t=t.tolist(), ranks=ranks)
    error = None
    try:
        spmmgnn.DistSpMM.from_scipy(sp.random(5, 7, density=0.5, random_state=0, format="csr")
                                    if comm.rank == 0 else None, reorder="rcm")
    except spmmgnn.SpmmgnnError as exc:
        error = f"{exc.collective}: {exc}"
    errors = comm.gather(error, root=0)
    if comm.rank == 0:
        out["errors"] = errors
        with open(sys.argv[1], "w") as fh:
            json.dump(out, fh)


if __name__ == "__main__":
    main()
