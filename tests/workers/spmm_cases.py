"""MPI worker: every SpMM algorithm vs scipy on awkward matrices, plus byte counts vs metrics.

Usage: mpiexec -n P python spmm_cases.py OUT.json [ALGORITHM ...] [--replication c]
[--float64-only] (the many-rank runs: float32 is the same code path, checked at small P).
Rank 0 writes a JSON list, one entry per (case, algorithm, dtype, f).
"""

from __future__ import annotations

import json
import sys

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

import spmmgnn
from spmmgnn.partitioners import metrics

comm = MPI.COMM_WORLD
P = comm.size


def cases(k: int):
    """(name, A, partition spec) built identically on every rank; k = number of block rows."""
    rng = np.random.default_rng(12345 + k)
    out = []
    n = 6 * k + 5  # never divisible by k for k > 1... and uneven blocks below
    A = sp.random(n, n, density=0.15, random_state=1, format="csr")  # non-symmetric
    out.append(("contiguous", A, None))
    sizes = rng.integers(1, 12, k)
    if k > 1:
        sizes[k // 2] = 0  # an empty block
    A2 = sp.random(int(sizes.sum()), int(sizes.sum()), density=0.2, random_state=2,
                   format="lil")
    A2[3 % A2.shape[0], :] = 0  # an empty row
    A2[:, 5 % A2.shape[0]] = 0  # an empty column
    out.append(("uneven_empty_block", sp.csr_array(A2), sizes.tolist()))
    n3 = 9 * k + 4
    A3 = sp.random(n3, n3, density=0.1, random_state=3, format="csr")
    A3.data -= 0.5
    parts = rng.integers(0, k, n3)
    if k > 2:
        parts[parts == 1] = 0  # part 1 empty in a part vector
    out.append(("part_vector", A3, parts))
    out.append(("no_offdiag", sp.csr_array(sp.identity(2 * k + 1) * 2.0), None))
    out.append(("all_zero", sp.csr_array((k + 2, k + 2)), None))
    return out


def main() -> None:
    path = sys.argv[1]
    args = sys.argv[2:]
    c = 1
    if "--replication" in args:
        i = args.index("--replication")
        c = int(args[i + 1])
        args = args[:i] + args[i + 2:]
    dtypes = ("float32", "float64")
    if "--float64-only" in args:
        args.remove("--float64-only")
        dtypes = ("float64",)
    algorithms = args or ["sparse1d", "oblivious1d"]
    grid = spmmgnn.ProcessGrid(comm, replication=c)
    k = grid.n_block_rows
    results = []
    for name, A, spec in cases(k):
        for algo in algorithms:
            op = spmmgnn.DistSpMM.from_scipy(A if comm.rank == 0 else None, grid,
                                             algorithm=algo, partition=spec)
            part = op.partition
            m = metrics(A, part.parts, k)
            for dtype in dtypes:
                for f in (1, 128):
                    rng = np.random.default_rng(f)
                    X = rng.standard_normal((A.shape[0], f)).astype(dtype)
                    itemsize = np.dtype(dtype).itemsize
                    xl = op.scatter_rows(X if comm.rank == 0 else None)
                    op.reset_stats()
                    yl = op.matmul(xl)
                    fwd = op.comm_stats()
                    op.reset_stats()
                    tl = op.matmul_t(xl)
                    bwd = op.comm_stats()
                    Y = op.gather_rows(yl)
                    T = op.gather_rows(tl)
                    stats = comm.gather(dict(fwd=fwd, bwd=bwd, block=grid.block_row,
                                             replica=grid.replica), root=0)
                    if comm.rank != 0:
                        continue
                    Ad = A.astype(dtype)
                    ref, reft = Ad @ X, Ad.T @ X
                    results.append(dict(
                        case=name, algorithm=algo, dtype=dtype, f=f, P=P, c=c,
                        err=_rel(Y, ref), err_t=_rel(T, reft),
                        ranks=stats, itemsize=itemsize,
                        send_volume=m.send_volume.tolist(),
                        recv_volume=m.recv_volume.tolist(),
                        pair_volume=metrics(A, part.parts, k, pairs=True).pair_volume.tolist(),
                        sizes=part.sizes.tolist()))
    if comm.rank == 0:
        with open(path, "w") as fh:
            json.dump(results, fh)


def _rel(got, ref) -> float:
    """max |got - ref| / max(|ref|) (0 for an all-zero reference that is matched exactly)."""
    diff = float(np.abs(got - ref).max()) if ref.size else 0.0
    scale = float(np.abs(ref).max()) if ref.size else 0.0
    return diff / scale if scale > 0 else diff


if __name__ == "__main__":
    main()
