"""MPI worker: rectangular A (m != n) with separate row and column layouts, every algorithm.

Usage: mpiexec -n P python rect_cases.py OUT.json
For each replication c dividing P (c <= 2), each algorithm of the P/c x c grid (the 2D/3D ones
run their rectangular case in grid_cases.py) and each case it records the errors
of ``A @ X`` and ``A.T @ Y`` against scipy, and every rank's bytes; sparse1d (sparse15d at
c = 2) also runs with the int8 codec. Rank 0 writes the JSON list, plus the layouts the test
needs to predict bytes.
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
F = 3


def cases(k: int) -> list[tuple[str, sp.csr_array, object, object]]:
    """(name, A, row layout, column layout); built identically on every rank."""
    rng = np.random.default_rng(7 + k)
    m, n = 5 * k + 3, 8 * k + 1
    tall = sp.random(n, m, density=0.2, random_state=11, format="csr")  # n x m: tall
    wide = sp.random(m, n, density=0.2, random_state=12, format="csr")
    wide.data -= 0.5
    row_sizes = rng.integers(1, 9, k)
    col_sizes = rng.integers(1, 12, k)
    if k > 1:
        row_sizes[0] = 0      # an empty block of rows
        col_sizes[k - 1] = 0  # an empty block of columns
    uneven = sp.random(int(row_sizes.sum()), int(col_sizes.sum()), density=0.25,
                       random_state=13, format="csr")
    col_parts = rng.integers(0, k, n)
    return [("wide_default_layouts", wide, None, None),
            ("tall_default_layouts", tall, None, None),
            ("uneven_sizes_empty_blocks", uneven, row_sizes.tolist(), col_sizes.tolist()),
            ("col_part_vector", wide, None, col_parts)]


def main() -> None:
    out = []
    for c in (1, 2):
        if P % c:
            continue
        grid = spmmgnn.ProcessGrid(comm, replication=c)
        k = grid.n_block_rows
        for name, A, rows, cols in cases(k):
            m, n = A.shape
            rng = np.random.default_rng(5)
            X, Y = rng.standard_normal((n, F)), rng.standard_normal((m, F))
            names = sorted(a for a, cls in spmmgnn.ALGORITHMS.items()
                           if grid.kind in cls.grid_kinds)
            runs = [(a, None) for a in names]
            runs.append(("sparse1d" if c == 1 else "sparse15d", "int8"))
            for algorithm, codec in runs:
                options = {} if codec is None else dict(codec=codec)
                op = spmmgnn.DistSpMM.from_scipy(A if comm.rank == 0 else None, grid,
                                                 algorithm=algorithm, partition=rows,
                                                 col_partition=cols, **options)
                z = op.gather_rows(op.matmul(op.scatter_rows(X if comm.rank == 0 else None)))
                fwd = op.comm_stats()
                op.reset_stats()
                y_local = op.scatter_rows(Y if comm.rank == 0 else None, side="output")
                t = op.gather_rows(op.matmul_t(y_local), side="input")
                bwd = op.comm_stats()
                ranks = comm.gather(dict(rank=comm.rank, block=grid.block_row,
                                         replica=grid.replica,
                                         fwd=[fwd["bytes_sent"], fwd["bytes_received"]],
                                         bwd=[bwd["bytes_sent"], bwd["bytes_received"]]),
                                    root=0)
                if comm.rank == 0:
                    ref_z, ref_t = A @ X, A.T @ Y
                    scale = max(1.0, float(np.abs(ref_z).max()), float(np.abs(ref_t).max()))
                    out.append(dict(
                        case=name, c=c, algorithm=algorithm, codec=codec, m=m, n=n, f=F,
                        err=float(np.abs(z - ref_z).max()) / scale,
                        err_t=float(np.abs(t - ref_t).max()) / scale,
                        row_perm=op.partition.perm.tolist(),
                        row_offsets=op.row_offsets.tolist(),
                        col_perm=op.col_partition.perm.tolist(),
                        col_offsets=op.col_offsets.tolist(), ranks=ranks))
    if comm.rank == 0:
        with open(sys.argv[1], "w") as fh:
            json.dump(out, fh)


if __name__ == "__main__":
    main()
