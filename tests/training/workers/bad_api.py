"""MPI worker: misuse of the library API that must end in one clear error, never a hang.

Usage: python bad_api.py MODE [OUT.json]

- ``grad OUT``: ``matmul``, ``matmul_t``, ``scatter_rows`` and ``gather_rows`` with a tensor
  that requires grad (each must be refused), and ``spmmgnn.nn.spmm`` on the same tensor (its
  gradient is compared with A.T @ 1 on root); rank 0 writes every rank's messages.
- ``algorithm OUT``: rank 0 asks for sparse1d, the others for oblivious1d; then the same
  algorithm with different codecs; then grids with different c. Records each rank's message.
- ``exit CODE``: rank 1 calls ``sys.exit(CODE)`` while the others wait in a barrier.
- ``exit-caught``: rank 1 calls ``sys.exit(3)`` inside ``try/except SystemExit`` and goes on;
  the job must end normally (status 0).
"""

from __future__ import annotations

import json
import sys

import numpy as np
import scipy.sparse as sp
import torch
from mpi4py import MPI

import spmmgnn
from spmmgnn import SpmmgnnError

comm = MPI.COMM_WORLD


def caught(fn) -> str | None:
    try:
        fn()
    except SpmmgnnError as exc:
        return str(exc)
    return None


def grad(out_path: str) -> None:
    n = 23
    A = sp.random(n, n, density=0.3, random_state=3, format="csr")
    op = spmmgnn.DistSpMM.from_scipy(A if comm.rank == 0 else None)
    x = torch.ones(op.n_local_in, 2, dtype=torch.float64, requires_grad=True)
    full = torch.ones(n, 2, dtype=torch.float64, requires_grad=True)
    out = dict(
        matmul=caught(lambda: op.matmul(x)),
        matmul_t=caught(lambda: op.matmul_t(x)),
        gather_rows=caught(lambda: op.gather_rows(x)),
        scatter_rows=caught(lambda: op.scatter_rows(full if comm.rank == 0 else None)),
    )
    from spmmgnn.nn import spmm

    spmm(op, x).sum().backward()
    g = op.gather_rows(x.grad)
    msgs = comm.gather(out, root=0)
    if comm.rank == 0:
        want = A.T @ np.ones((n, 2))
        result = dict(messages=msgs, grad_error=float(np.abs(g.numpy() - want).max()))
        with open(out_path, "w") as fh:
            json.dump(result, fh)


def algorithm(out_path: str) -> None:
    n = 17
    A = sp.random(n, n, density=0.3, random_state=4, format="csr")
    mine = "sparse1d" if comm.rank == 0 else "oblivious1d"
    codec = "int8" if comm.rank == 0 else "int2"
    out = dict(
        algorithm=caught(lambda: spmmgnn.DistSpMM.from_scipy(A if comm.rank == 0 else None,
                                                             algorithm=mine)),
        codec=caught(lambda: spmmgnn.DistSpMM.from_scipy(A if comm.rank == 0 else None,
                                                         algorithm="sparse1d", codec=codec)),
        grid=caught(lambda: spmmgnn.ProcessGrid(comm, 1 if comm.rank == 0 else comm.size)),
        shape=caught(lambda: spmmgnn.ProcessGrid(
            comm, shape=(1, comm.size) if comm.rank == 0 else (comm.size, 1))),
        product=caught(lambda: spmmgnn.ProcessGrid(comm, shape=(2, 2))),
        wrong_kind=caught(lambda: spmmgnn.DistSpMM.from_scipy(
            A if comm.rank == 0 else None, spmmgnn.ProcessGrid(comm, shape=(comm.size, 1)),
            algorithm="sparse3d")),
    )
    msgs = comm.gather(out, root=0)
    if comm.rank == 0:
        with open(out_path, "w") as fh:
            json.dump(msgs, fh)


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "grad":
        grad(sys.argv[2])
    elif mode == "algorithm":
        algorithm(sys.argv[2])
    elif mode == "exit":
        if comm.rank == 1:
            sys.exit(int(sys.argv[2]))
        comm.Barrier()
        print(f"rank {comm.rank}: passed the barrier", flush=True)
    elif mode == "exit-caught":
        if comm.rank == 1:
            try:
                sys.exit(3)
            except SystemExit:
                pass
        comm.Barrier()
        print(f"rank {comm.rank}: done", flush=True)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
