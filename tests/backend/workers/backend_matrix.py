"""MPI worker: every family on every backend and transport, against scipy.

Usage: mpiexec -n P python backend_matrix.py OUT.json

For each registered family, on the grid its kind takes at P ranks (1D; 1.5D with c = 2 when
P is even; 2D and 3D on the factors of P closest to a square or cube), and for each of
(host, MPI), (torch on the CPU, MPI), (torch on the CPU, torch.distributed over Gloo), the
operator multiplies A X and Aᵀ Y in float32 and float64 (A non-symmetric, with an empty row,
n not divisible by P, a part vector with an empty part). Rank 0 records the largest error
against scipy per run, and every rank's bytes sent, so the test can check that the three
runs of a family move the same rows.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import scipy.sparse as sp
import torch
from mpi4py import MPI

import spmmgnn

comm = MPI.COMM_WORLD
P = comm.size
RUNS = (("none", "mpi"), ("cpu", "mpi"), ("cpu", "torch"))


def matrix() -> sp.csr_array:
    """Non-symmetric, an empty row, n = 7 P + 3 (never divisible by P)."""
    n = 7 * P + 3
    A = sp.random(n, n, density=0.12, random_state=P, format="lil")
    A[1, :] = 0
    return sp.csr_array(A)


def part_vector(n: int, k: int) -> np.ndarray | None:
    """A part of every row with part 1 empty (k > 2), the same on every rank."""
    if k < 2:
        return None
    parts = np.random.default_rng(3).integers(0, k, n)
    if k > 2:
        parts[parts == 1] = 0
    return parts


def run(algo: str, device: str, transport: str, A) -> dict:
    cls = spmmgnn.ALGORITHMS[algo]
    kind = cls.grid_kinds[-1]
    c = 2 if kind == "1.5d" else 1
    grid = cls.grid_for(comm, replication=c, device=None if device == "none" else device,
                        transport=transport)
    k = P if kind in ("2d", "3d") else grid.n_block_rows
    parts = None if algo == "featureparallel" else part_vector(A.shape[0], k)
    op = spmmgnn.DistSpMM.from_scipy(A if comm.rank == 0 else None, grid, algorithm=algo,
                                     partition=parts)
    rng = np.random.default_rng(5)
    X, Y = rng.random((A.shape[1], 3)), rng.random((A.shape[0], 3))
    err = 0.0
    for dt in (np.float64, np.float32):
        def mine(M, dt=dt):
            if comm.rank != 0:
                return None
            m = M.astype(dt)
            return m if device == "none" else torch.from_numpy(m)

        z = op.gather_rows(op.matmul(op.scatter_rows(mine(X))))
        t = op.gather_rows(op.matmul_t(op.scatter_rows(mine(Y), side="output")),
                           side="input")
        if comm.rank == 0:
            z, t = (np.asarray(v.numpy() if torch.is_tensor(v) else v, dtype=np.float64)
                    for v in (z, t))
            ref_z, ref_t = A @ X.astype(dt), A.T @ Y.astype(dt)
            scale = max(1.0, float(np.abs(ref_z).max()), float(np.abs(ref_t).max()))
            err = max(err, float(np.abs(z - ref_z).max()) / scale,
                      float(np.abs(t - ref_t).max()) / scale)
    stats = op.comm_stats()
    sent = comm.gather(int(stats["bytes_sent"]), root=0)
    return dict(err=err, sent=sent, transport=grid.transport.name,
                shape=list(grid.shape) if hasattr(grid, "shape") else None)


def main() -> None:
    out = {}
    A = matrix()
    for algo in sorted(spmmgnn.ALGORITHMS):
        if spmmgnn.ALGORITHMS[algo].grid_kinds[-1] == "1.5d" and P % 2:
            continue
        for device, transport in RUNS:
            try:
                got = run(algo, device, transport, A)
            except spmmgnn.SpmmgnnError as exc:
                got = dict(error=str(exc))
            out[f"{algo} {device} {transport}"] = got
    if comm.rank == 0:
        with open(sys.argv[1], "w") as fh:
            json.dump(out, fh, indent=1)


main()
