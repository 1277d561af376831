"""A torch tensor with its negative bit set (``z.conj().imag``) given to every call that
reads a dense operand, on a numpy grid and a device (cpu) grid: each call must raise the
same SpmmgnnError on every rank, naming ``resolve_neg``. Writes {grid: {call: message}} from
rank 0 to argv[1]; after the refusals a resolved copy still multiplies correctly."""

from __future__ import annotations

import json
import sys

import numpy as np
import scipy.sparse as sp
import torch
from mpi4py import MPI

from spmmgnn import DistSpMM, ProcessGrid, SpmmgnnError

comm = MPI.COMM_WORLD
A = sp.random(40, 40, density=0.2, random_state=0, format="csr")
z = torch.randn(40, 3, dtype=torch.complex128, generator=torch.Generator().manual_seed(1))
FULL = torch.complex(torch.zeros(40, 3, dtype=torch.float64),   # all rows, negative bit
                     torch.ones(40, 3, dtype=torch.float64)).conj().imag
result: dict = {}
for device in (None, "cpu"):
    grid = ProcessGrid(comm, device=device)
    op = DistSpMM.from_scipy(A, grid, algorithm="sparse1d")
    mine = op.scatter_rows(z.imag.contiguous().numpy() if device is None else z.imag)
    lazy = (torch.as_tensor(mine) if device is None else mine).conj()  # real: a no-op
    lazy = torch.complex(torch.zeros_like(lazy), lazy).conj().imag    # negative bit set
    assert lazy.is_neg()
    calls = {"matmul": lambda op, x: op.matmul(x), "matmul_t": lambda op, x: op.matmul_t(x),
             "gather_rows": lambda op, x: op.gather_rows(x),
             "dot": lambda op, x: op.dot(x, x), "norm": lambda op, x: op.norm(x),
             "scatter_rows": lambda op, x: op.scatter_rows(FULL)}
    got = {}
    for name, call in calls.items():
        try:
            call(op, lazy)
            got[name] = "accepted"
        except SpmmgnnError as exc:
            got[name] = f"{exc.collective}: {exc}"
    y = op.gather_rows(op.matmul(lazy.resolve_neg()))
    if comm.Get_rank() == 0:
        ref = A @ (-z.imag.numpy())
        got["resolved"] = float(np.abs(np.asarray(y) - ref).max())
    result["numpy" if device is None else "device"] = got
if comm.Get_rank() == 0:
    with open(sys.argv[1], "w") as fh:
        json.dump(result, fh)
