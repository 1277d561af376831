"""MPI worker: the 2D and 3D algorithms against scipy on awkward matrices.

Usage: mpiexec -n P python grid_cases.py OUT.json SHAPE [SHAPE ...]   (SHAPE like 2x3 or 2x2x2)
For each grid shape, the sparse and the oblivious algorithm of its dimension run A X and
A^T Y (non-symmetric A, uneven and empty parts, empty rows, n not divisible by P, float32
and float64, a rectangular A; an ER graph of average degree 8 and a directed power-law graph
on near-equal contiguous blocks) and rank 0 records the errors against scipy, each rank's
bytes, its peers (the ranks it exchanged rows with in one call), the route the sparse
algorithm took and, for square A, the volume model's bytes.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

import spmmgnn
from spmmgnn.benchmark.volumes import Layout, predict
from spmmgnn.grid import parse_grid
from spmmgnn.stages import stage_ranges

comm = MPI.COMM_WORLD
P = comm.size


def cases():
    """(name, A, row partition, column partition) built identically on every rank."""
    rng = np.random.default_rng(7 + P)
    n = 11 * P + 3                                     # never divisible by P
    A = sp.random(n, n, density=4.0 / n * 3, random_state=P, format="lil")  # non-symmetric
    A[2, :] = 0                                        # an empty row
    A = sp.csr_array(A)
    parts = rng.integers(0, P, n)
    parts[parts == 1] = 0                              # an empty part
    sizes = rng.integers(0, 25, P)
    sizes[-1] = max(0, sizes[-1])
    sizes[P // 2] = 0                                  # an empty block
    m = int(sizes.sum())
    B = sp.csr_array(sp.random(m, m, density=0.08, random_state=P + 1, format="csr"))
    R = sp.csr_array(sp.random(5 * P + 2, 8 * P + 1, density=0.1, random_state=P + 2,
                               format="csr"))          # rectangular
    n = 13 * P + 5
    e = rng.integers(0, n, (2, 4 * n))                 # ER, average degree 8 (symmetric)
    er = sp.csr_array((np.ones(8 * n), (np.r_[e[0], e[1]], np.r_[e[1], e[0]])), shape=(n, n))
    w = 1.0 / np.arange(1, n + 1) ** 0.9               # directed, power-law in-degrees
    heads = rng.choice(n, 6 * n, p=w / w.sum())
    pl = sp.csr_array((np.ones(6 * n), (rng.integers(0, n, 6 * n), heads)), shape=(n, n))
    return [("part_vector", A, parts, None), ("uneven_sizes", B, sizes.tolist(), None),
            ("rectangular", R, None, None), ("er8", er, None, None),
            ("powerlaw_directed", pl, None, None)]


def cagnet_bytes(A, row_offsets, col_offsets, shape, f: int, itemsize: int) -> list[int]:
    """What CAGNET's SUMMA (``summa_sparse``, ``gcn_distr_2d.py``) sends per rank (i, j) in one
    A H, from scipy alone: the stage tiles A[V_i, U_k] it holds (k = j mod pc: CAGNET's
    (i, k) on a square grid), 3 words per non-zero to the pc - 1 others of its process row,
    and its block H[U_i, F_j] to the pr - 1 others of its process column."""
    pr, pc = shape
    width = np.diff(stage_ranges(f, pc))   # F_j (CAGNET: f // pc, the rest to the last)
    out = []
    for i in range(pr):
        rows = slice(row_offsets[i * pc], row_offsets[(i + 1) * pc])
        for j in range(pc):
            tiles = sum(A[rows][:, col_offsets[k * pc]:col_offsets[(k + 1) * pc]].nnz
                        for k in range(pr) if k % pc == j)
            u_i = int(col_offsets[(i + 1) * pc] - col_offsets[i * pc])
            out.append(int(tiles * (8 + itemsize) * (pc - 1)
                           + (pr - 1) * u_i * int(width[j]) * itemsize))
    return out


def peers(op) -> int:
    """The distinct ranks this rank's plans exchange rows with (the sparse algorithms)."""
    plans = [op.product.expand, op.product.fold] + ([op.fiber] if hasattr(op, "fiber") else [])
    world = comm.Get_group()
    out = set()
    for plan in plans:
        nonzero = np.flatnonzero((plan.send_counts > 0) | (plan.recv_counts > 0))
        ranks = MPI.Group.Translate_ranks(plan.comm.Get_group(), nonzero.tolist(), world)
        out |= set(ranks)
    return len(out - {comm.rank})


def main(path: str, shapes: list[str]) -> None:
    rows = []
    for text in shapes:
        shape = parse_grid(text)
        grid = spmmgnn.ProcessGrid(comm, shape=shape)
        family = ["sparse2d", "oblivious2d"] if len(shape) == 2 else ["sparse3d", "oblivious3d"]
        for name, A, part, col_part in cases():
            for algo in family:
                op = spmmgnn.DistSpMM.from_scipy(A if comm.rank == 0 else None, grid,
                                                 algorithm=algo, partition=part,
                                                 col_partition=col_part)
                for dtype, f in (("float64", 5), ("float32", 16)):
                    rng = np.random.default_rng(f)
                    X = rng.standard_normal((A.shape[1], f)).astype(dtype)
                    Y = rng.standard_normal((A.shape[0], f)).astype(dtype)
                    x, y = op.scatter_rows(X), op.scatter_rows(Y, side="output")
                    op.reset_stats()
                    z = op.gather_rows(op.matmul(x))
                    fwd = op.comm_stats()["bytes_sent"]
                    phases = op.comm_stats()["bytes_sent_by_phase"]
                    op.reset_stats()
                    t = op.gather_rows(op.matmul_t(y), side="input")
                    bwd = op.comm_stats()["bytes_sent"]
                    p = peers(op) if algo.startswith("sparse") else -1
                    ranks = comm.gather(dict(sent=fwd, sent_t=bwd, peers=p, **phases),
                                        root=0)
                    route = [op.route(f, dtype, d) if algo.startswith("sparse") else algo
                             for d in (True, False)]
                    if comm.rank == 0:
                        model = None
                        if A.shape[0] == A.shape[1]:
                            v = predict(algo, Layout.build(A, part, P), P, 1, f,
                                        np.dtype(dtype).itemsize, shape=shape)
                            model = dict(sent=v.sent.tolist(), sent_t=v.sent_t.tolist())
                        if algo == "oblivious2d":
                            rp, cp = op.partition, op.col_partition   # as laid out
                            Ap = A if rp.is_identity and cp.is_identity else \
                                sp.csr_array(A[rp.perm][:, cp.perm])
                            model = dict(model or {}, cagnet=cagnet_bytes(
                                Ap, op.row_offsets, op.col_offsets, shape, f,
                                np.dtype(dtype).itemsize))
                        scale = max(1.0, float(np.abs(A).sum(axis=1).max()))
                        rows.append(dict(
                            shape=list(shape), case=name, algorithm=algo, dtype=dtype,
                            err=float(np.abs(z - A @ X).max()) / scale,
                            err_t=float(np.abs(t - A.T @ Y).max()) / scale,
                            ranks=ranks, route=route, model=model))
    if comm.rank == 0:
        with open(path, "w") as fh:
            json.dump(rows, fh)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
