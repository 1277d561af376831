"""MPI worker (3 ranks): rank 1 raises RuntimeError in user code before ``op.matmul``.

Usage: python fault_user.py [thread]  ("thread": the error happens in a threading.Thread of
rank 1, whose main thread then enters the collective). Without the abort hook the other ranks
would wait in matmul forever.
"""

from __future__ import annotations

import sys
import threading

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

import spmmgnn

spmmgnn.install_abort_hook()  # as docs/failures.md tells a script run under mpiexec
comm = MPI.COMM_WORLD
n = 40
A = sp.random(n, n, density=0.2, random_state=3, format="csr")
op = spmmgnn.DistSpMM.from_scipy(A if comm.rank == 0 else None, spmmgnn.ProcessGrid())
x = op.scatter_rows(np.ones((n, 4)) if comm.rank == 0 else None)


def bug():
    raise RuntimeError("user bug on purpose")


if comm.rank == 1:
    if sys.argv[1:] == ["thread"]:
        t = threading.Thread(target=bug, name="worker")
        t.start()
        t.join()
    else:
        bug()
op.matmul(x)
op.matmul(x)
print("finished", flush=True)
