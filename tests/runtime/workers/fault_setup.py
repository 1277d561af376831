"""MPI worker (3 ranks): bad input on rank 1 only while an operator is being set up.

Usage: python fault_setup.py MODE
  block_row  rank 1 passes a block row of the wrong shape to ``DistSpMM.from_block_row``;
  halo       rank 1 passes unsorted ghost ids to ``HaloPlan`` (its check fails there only).

Every rank must raise the same collective SpmmgnnError (no rank is left in a collective).
Each prints ``rank r caught SpmmgnnError(collective=...): message`` on stdout, all ranks
meet once more (proving none is stuck), and the error is re-raised unhandled, so the job
ends through the abort hook with a non-zero status.
"""

from __future__ import annotations

import sys

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

import spmmgnn
from spmmgnn.exchange.halo import HaloPlan

comm = MPI.COMM_WORLD
mode = sys.argv[1]
n = 30
try:
    if mode == "block_row":
        grid = spmmgnn.ProcessGrid(comm)
        part = spmmgnn.Partition.contiguous(n, comm.size)
        lo, hi = part.offsets[comm.rank], part.offsets[comm.rank + 1]
        rows = int(hi - lo) + (1 if comm.rank == 1 else 0)  # one row too many on rank 1
        block = sp.random(rows, n, density=0.2, random_state=comm.rank, format="csr")
        spmmgnn.DistSpMM.from_block_row(block, grid, part)
    elif mode == "halo":
        offsets = np.linspace(0, n, comm.size + 1).astype(np.int64)
        ghosts = np.array([i for i in range(n) if not offsets[comm.rank] <= i
                           < offsets[comm.rank + 1]][:4], dtype=np.int64)
        if comm.rank == 1:
            ghosts = ghosts[::-1].copy()  # unsorted: the plan's check fails on rank 1 only
        HaloPlan(comm, offsets, ghosts)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
except spmmgnn.SpmmgnnError as exc:
    print(f"rank {comm.rank} caught SpmmgnnError(collective={exc.collective}): {exc}",
          flush=True)
    comm.Barrier()
    raise
print(f"rank {comm.rank}: no error", flush=True)
