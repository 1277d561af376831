"""MPI worker: a torch-transport grid's process group at exit.

Usage: mpiexec -n P python torch_exit.py [EXIT_RANK]. Every rank builds a Gloo grid (c = 1 and
c = P) and runs a product and its transpose. An exit handler registered before the grid (so it
runs after the library's) prints ``rank r: group left <bool>``. With EXIT_RANK, that rank calls
``sys.exit(3)`` after the products instead (the abort hook must end the job, not a teardown
waiting on peers).
"""

from __future__ import annotations

import atexit
import sys

import numpy as np
import scipy.sparse as sp
import torch
import torch.distributed as dist
from mpi4py import MPI

import spmmgnn

comm = MPI.COMM_WORLD
atexit.register(lambda: print(f"rank {comm.rank}: group left {not dist.is_initialized()}",
                              flush=True))
n = 60
A = sp.random(n, n, density=0.1, format="csr", random_state=2, dtype=np.float32)
for c in (1, comm.size):
    grid = spmmgnn.ProcessGrid(comm, replication=c, device="cpu", transport="torch")
    op = spmmgnn.DistSpMM.from_scipy(A if comm.rank == 0 else None, grid,
                                     algorithm="sparse1d" if c == 1 else "sparse15d")
    X = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
    x = op.scatter_rows(torch.from_numpy(X) if comm.rank == 0 else None)
    y = op.gather_rows(op.matmul(x))
    if comm.rank == 0:
        assert np.allclose(y.numpy(), A @ X, rtol=1e-5), c
    op.matmul_t(x)
if len(sys.argv) > 1 and comm.rank == int(sys.argv[1]):
    sys.exit(3)
comm.Barrier()
