"""MPI worker: distributed GCN / mean normalization of block rows vs the offline one.

Usage: mpiexec -n P python train_normalize.py OUT.json
Every rank builds the same directed, weighted matrix (some self loops present, an empty
row, uneven blocks with an empty one), normalizes its block row, and rank 0 compares.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from spmmgnn.data.normalize import gcn_norm, mean_norm, normalize_block_row

comm = MPI.COMM_WORLD
P = comm.size
n = 40
A = sp.random(n, n, density=0.12, random_state=4, format="lil")
A[5, 5] = 2.0  # an existing self loop keeps its weight
A[7, :] = 0  # an empty row (only the self loop remains for GCN)
A = sp.csr_array(A)
sizes = np.full(P, n // P)
sizes[-1] += n - sizes.sum()
if P > 2:
    sizes[1], sizes[0] = 0, sizes[0] + sizes[1]
offsets = np.r_[0, np.cumsum(sizes)]
lo, hi = int(offsets[comm.rank]), int(offsets[comm.rank + 1])
out = {}
for kind, offline in (("gcn", gcn_norm), ("mean", mean_norm)):
    mine = normalize_block_row(A[lo:hi], kind, offsets, comm)
    blocks = comm.gather(mine, root=0)
    if comm.rank == 0:
        full = sp.vstack(blocks).toarray()
        out[kind] = float(np.abs(full - offline(A).toarray()).max())
if comm.rank == 0:
    out["sizes"] = sizes.tolist()
    with open(sys.argv[1], "w") as fh:
        json.dump(out, fh)
