"""MPI worker: building an operator and calling the library leaves the caller's thread
settings as they were (torch's count, OpenBLAS's, numba's count in the calling thread),
while the library's own calls run at the library's count.

Usage: mpiexec -n P python thread_state.py OUT.json  (with $SPMMGNN_THREADS=1 and
$NUMBA_NUM_THREADS=2, so the library's count differs from numba's default)
Records the states; rank 0 writes the JSON (nothing asserted here).
"""

from __future__ import annotations

import json
import os
import sys

import torch

torch.set_num_threads(1)  # the caller's choice, before numba's pool starts (in the library)
torch.get_num_threads()  # (read once: numba's first parallel region would then raise it to 2)

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
from mpi4py import MPI  # noqa: E402
from threadpoolctl import threadpool_info, threadpool_limits  # noqa: E402

import spmmgnn  # noqa: E402
from spmmgnn.nn import spmm  # noqa: E402
from spmmgnn.nn.dropout import relu_dropout  # noqa: E402
from spmmgnn.nn.linear import linear  # noqa: E402

comm = MPI.COMM_WORLD
threadpool_limits(2, user_api="blas")  # the caller's BLAS: 2 threads in every library


def state() -> dict:
    import numba

    return {"torch": torch.get_num_threads(), "numba": numba.get_num_threads(),
            "blas": [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]}


out: dict = {"env": {k: os.environ.get(k) for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}}
A = sp.random(90, 90, density=0.08, format="csr", random_state=3) + sp.eye(90)
op = spmmgnn.DistSpMM.from_scipy(A if comm.rank == 0 else None, algorithm="sparse1d")
out["torch_after_build"] = torch.get_num_threads()  # numba's pool started in here
out["before"] = state()
x = np.random.default_rng(0).random((op.n_local_in, 8))
op.matmul(x)
op.matmul_t(op.matmul(x[:, 0]))
op.gram(x)
op.qr(x)
xt = torch.tensor(x, requires_grad=True)
w = torch.rand(8, 4, dtype=torch.float64, requires_grad=True)
h = relu_dropout(linear(spmm(op, xt), w), op.row_ids(), 0.5, 0, 0, 0)
h.sum().backward()
out["after"] = state()
out["library"] = spmmgnn.get_threads()
with spmmgnn.runtime.threads.scope(blas=True):  # what the library's calls run at
    out["inside"] = state()
out["after_scope"] = state()
states = comm.gather(out)
if comm.rank == 0:
    with open(sys.argv[1], "w") as fh:
        json.dump(states, fh)
