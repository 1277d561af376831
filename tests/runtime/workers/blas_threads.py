"""MPI worker: ``dot`` and ``norm`` of large vectors run numpy's BLAS at the library's
threads when the script imported numpy before spmmgnn (as every documented example does).

Usage: mpiexec -n P python blas_threads.py OUT.json  (with $SPMMGNN_THREADS=1)
numpy is imported first, so its OpenBLAS loads with its own defaults (all cores, idle
threads spinning ~0.1 s after a threaded call). Records the CPU time the process's other
threads (OpenBLAS's workers; numba's pool idles at 1 thread) spend during 60 ``dot`` and
``norm`` calls on 40,000 rows a rank, and the caller's BLAS count before and after; rank 0
writes the JSON (nothing asserted here).
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np  # noqa: I001  (first: OpenBLAS loads before spmmgnn)
import scipy.sparse as sp
from mpi4py import MPI
from threadpoolctl import threadpool_info

import spmmgnn


def helper_cpu_seconds() -> float:
    """User + system CPU time of every thread of this process but the main one."""
    total = 0
    for tid in os.listdir("/proc/self/task"):
        if int(tid) == os.getpid():
            continue
        try:
            with open(f"/proc/self/task/{tid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:  # a thread that ended meanwhile
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def blas_counts() -> list[int]:
    return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]


comm = MPI.COMM_WORLD
ROWS = 40_000
n = ROWS * comm.size
op = spmmgnn.DistSpMM.from_scipy(sp.eye(n, format="csr") if comm.rank == 0 else None)
x = np.random.default_rng(comm.rank).random(op.n_local_in)
X = np.ascontiguousarray(np.random.default_rng(5).random((op.n_local_in, 1)), dtype=np.float32)
before = blas_counts()
op.dot(x, x)
op.norm(x)
start = helper_cpu_seconds()
for _ in range(20):
    op.dot(x, x)
    op.norm(x)
    op.norm(X)  # float32 column: the same BLAS dot, of float64 copies
spent = helper_cpu_seconds() - start
out = {"rank": comm.rank, "library": spmmgnn.get_threads(), "before": before,
       "after": blas_counts(), "helper_cpu": spent,
       "dot_right": bool(np.isclose(op.dot(x, x), comm.allreduce(float(x @ x))))}
states = comm.gather(out)
if comm.rank == 0:
    with open(sys.argv[1], "w") as fh:
        json.dump(states, fh)
