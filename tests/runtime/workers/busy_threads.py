"""MPI worker: the library's running threads follow the cores other work keeps busy
(``$SPMMGNN_BUSY_CORES``), and training gives the same numbers bit for bit whatever they are.

Usage: mpiexec -n P python busy_threads.py OUT.json  (with $NUMBA_NUM_THREADS=2)
Trains the same GCN three times from the same start: with no core busy (2 threads run),
with all but 0.9 of this rank's cores busy (1 thread runs), and switching between the two
at every step (a look at the cores before every scope). Rank 0 writes, per run, the losses
(as hex floats), the threads each step ran and a digest of the final parameters; and the
counts numba, torch and the BLAS ran inside a step scope with the cores busy.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys

import torch
from mpi4py import MPI
from threadpoolctl import threadpool_info

import spmmgnn
from spmmgnn.algorithms import ALGORITHMS
from spmmgnn.data.csbm import csbm
from spmmgnn.runtime import threads
from spmmgnn.training import TrainConfig, Trainer, distribute_graph

comm = MPI.COMM_WORLD
spmmgnn.set_threads(2)
torch.set_num_threads(2)
cores = len(os.sched_getaffinity(0))
BUSY = {"quiet": "0", "busy": f"{cores - 0.9:g}"}  # busy: threads_for(2, cores, .) = 1

g = csbm(n=1003, avg_degree=8.0, num_features=24, num_classes=5, seed=1) \
    if comm.rank == 0 else None
grid = ALGORITHMS["sparse1d"].grid_for(comm)
data = distribute_graph(g, grid, "gcn", algorithm="sparse1d")
cfg = TrainConfig(model="gcn", layers=3, hidden=40, dropout=0.5, epochs=1, eval_every=0,
                  progress=False, cache_input_aggregation=False)


def train(mode: str) -> dict:
    torch.manual_seed(0)
    trainer = Trainer(data, cfg)
    losses, ran = [], []
    for epoch in range(1, 6):
        if mode == "switch":
            os.environ[threads.BUSY_ENV] = BUSY["busy" if epoch % 2 else "quiet"]
        losses.append(float(trainer.train_step(epoch)["loss"]).hex())
        ran.append(threads.running_threads())
    params = b"".join(p.detach().numpy().tobytes() for p in trainer.params)
    return dict(losses=losses, ran=ran, params=hashlib.sha256(params).hexdigest(),
                threads=threads.get_threads())


out = {}
threads.LOOK_SECONDS = 0.0  # look before every scope: the switches take effect at once
for mode in ("quiet", "busy", "switch"):
    os.environ[threads.BUSY_ENV] = BUSY.get(mode, "0")
    out[mode] = comm.gather(train(mode))
os.environ[threads.BUSY_ENV] = BUSY["busy"]
with threads.scope(blas=True, torch=True):
    import numba

    out["inside_busy"] = dict(
        numba=numba.get_num_threads(), torch=torch.get_num_threads(),
        blas=[i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"])
out["after"] = dict(torch=torch.get_num_threads())
if comm.rank == 0:
    with open(sys.argv[1], "w") as fh:
        json.dump(out, fh)
