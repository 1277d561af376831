"""MPI worker: measured comm_stats() bytes of every algorithm, per rank, forward and transpose.

Usage: mpiexec -n P python bench_volumes.py OUT.json
Rank 0 writes {"cases": {name: {"n", "rows", "cols", "parts"}}, "runs": [...]} so the test can
predict the same numbers from the matrix and the part vector alone.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

import spmmgnn
from spmmgnn.benchmark.volumes import CODEC_ALGORITHMS, GRID_ALGORITHMS, ONE_D, VOLUMES

comm = MPI.COMM_WORLD
P = comm.size
KNOWN = sorted(a for a in spmmgnn.ALGORITHMS if a in VOLUMES)
# 2D and 3D grids per P: square and not, one layer and several (the fiber step)
SHAPES = {2: [(2, 1), (1, 2), (1, 1, 2)], 3: [(3, 1), (1, 3), (1, 3, 1), (1, 1, 3)],
          4: [(2, 2), (1, 4), (2, 1, 2), (1, 2, 2)]}


def cases(k: int) -> dict:
    """name -> (A, part vector or None); identical on every rank (seeded)."""
    n = 7 * k + 5
    A = sp.random(n, n, density=0.12, random_state=4 + k, format="csr")  # not symmetric
    rng = np.random.default_rng(100 + k)
    parts = rng.integers(0, k, n)
    if k > 2:
        parts[parts == 1] = 0  # an empty block
    H = sp.lil_array(A)
    H[0, :] = 1.0   # a hub row and a hub column: covers smaller than the column sets
    H[:, n - 1] = 1.0
    return {"contiguous": (A, None), "random_uneven": (A, parts),
            "hubs": (sp.csr_array(H), rng.integers(0, k, n))}


def saved_case(A, parts) -> dict:
    """A case of ``cases`` as JSON, for the test to rebuild and model: n, its non-zeros'
    rows and columns, the part vector."""
    coo = A.tocoo()
    return dict(n=A.shape[0], rows=coo.row.tolist(), cols=coo.col.tolist(),
                parts=None if parts is None else parts.tolist())


def grids():
    """(grid, c, shape, the algorithms it runs)."""
    for c in [c for c in range(1, P + 1) if P % c == 0]:
        yield (spmmgnn.ProcessGrid(comm, replication=c), c, None,
               [a for a in KNOWN if a not in GRID_ALGORITHMS and (c == 1 or a not in ONE_D)])
    for shape in SHAPES.get(P, []):
        yield (spmmgnn.ProcessGrid(comm, shape=shape), 1, shape,
               [a for a in KNOWN if GRID_ALGORITHMS.get(a) == len(shape)])


def main(out: str) -> None:
    runs, saved = [], {}
    for grid, c, shape, algorithms in grids():
        k = P // c
        for name, (A, parts) in cases(k).items():
            saved[f"{name}-k{k}"] = saved_case(A, parts)
            for algo in algorithms:
                codecs = [None, "int2", "bfloat16"] if algo in CODEC_ALGORITHMS else [None]
                variants = ([(cd, np.float32, 10) for cd in codecs] if name == "random_uneven"
                            else [(None, np.float64, 3)])
                for codec, dtype, f in variants:
                    opts = {} if codec is None else dict(codec=codec)
                    op = spmmgnn.DistSpMM.from_scipy(A if comm.rank == 0 else None, grid,
                                                     algorithm=algo, partition=parts, **opts)
                    X = np.random.default_rng(0).standard_normal((A.shape[0], f)).astype(dtype)
                    x = op.scatter_rows(X)
                    op.reset_stats()
                    op.matmul(x)
                    fwd = op.comm_stats()
                    op.reset_stats()
                    op.matmul_t(x)
                    bwd = op.comm_stats()
                    keys = ("bytes_sent", "bytes_received", "allreduce_bytes")
                    mine = {f"{key}{sfx}": int(s[key]) for s, sfx in ((fwd, ""), (bwd, "_t"))
                            for key in keys}
                    allr = comm.gather(mine, root=0)
                    if comm.rank == 0:
                        runs.append(dict(case=f"{name}-k{k}", algorithm=algo, c=c, f=f,
                                         shape=shape,
                                         itemsize=np.dtype(dtype).itemsize, codec=codec,
                                         ranks=allr))
    if comm.rank == 0:
        with open(out, "w") as fh:
            json.dump(dict(P=P, algorithms=KNOWN, cases=saved, runs=runs), fh)


if __name__ == "__main__":
    main(sys.argv[1])
