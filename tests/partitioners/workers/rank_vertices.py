"""MPI worker: which source-graph vertices each rank trains on when it loads an HDF5 graph
the way ``spmmgnn train`` does (``load_h5_distributed``, sparse1d).

Usage: mpiexec -n P python rank_vertices.py OUT.json GRAPH.h5
Rank 0 writes {"rank": [the rank of each source vertex id]}.
"""

from __future__ import annotations

import json
import sys
import warnings

import numpy as np
from mpi4py import MPI

from spmmgnn import ProcessGrid
from spmmgnn.training import load_h5_distributed

comm = MPI.COMM_WORLD
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # a split drawn for an unlabelled graph
    data = load_h5_distributed(sys.argv[2], ProcessGrid(comm, 1), "gcn", "sparse1d")
ids = comm.gather(np.asarray(data.vertex_ids, dtype=np.int64), root=0)
if comm.rank == 0:
    rank = np.empty(data.n, dtype=np.int64)
    for r, v in enumerate(ids):
        rank[v] = r
    with open(sys.argv[1], "w") as fh:
        json.dump(dict(rank=rank.tolist()), fh)
