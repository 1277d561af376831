"""MPI worker: peak traced memory of one rank loading its block row of an HDF5 graph the way
``spmmgnn train`` does and running one SpMM on its features.

Usage: mpiexec -n P python memory_h5.py OUT.json GRAPH.h5 [ALGORITHM]
Rank 0 writes {"peak": [bytes per rank], "n": n}. A first, untraced load and SpMM does the
imports and loads the numba kernels, so the traced second one counts what the data and the
operator allocate.
"""

from __future__ import annotations

import json
import sys
import tracemalloc
import warnings

from mpi4py import MPI

from spmmgnn import ProcessGrid
from spmmgnn.training import load_h5_distributed

comm = MPI.COMM_WORLD
algorithm = sys.argv[3] if len(sys.argv) > 3 else "sparse1d"
grid = ProcessGrid(comm, 1)


def load_and_multiply():
    data = load_h5_distributed(sys.argv[2], grid, "gcn", algorithm)
    data.op.matmul(data.features.numpy())
    return data.n


with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # the split it draws, said once per load
    load_and_multiply()
    comm.Barrier()
    tracemalloc.start()
    n = load_and_multiply()
_, peak = tracemalloc.get_traced_memory()
tracemalloc.stop()
peaks = comm.gather(int(peak), root=0)
if comm.rank == 0:
    with open(sys.argv[1], "w") as fh:
        json.dump(dict(peak=peaks, n=n), fh)
