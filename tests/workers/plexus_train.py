"""MPI worker: GCN training with ``--algorithm plexus3d`` on one 3D grid, 3 epochs, dropout on.

Usage: mpiexec -n P python plexus_train.py OUT.json SHAPE   (SHAPE like 2x3x2)
A tiny directed CSBM graph (n = 61: no grid axis divides it, A not symmetric); rank 0 writes
{"graph": ..., "cases": [{model config, trainer, grid, losses}]} for the row-layout trainer.
The test trains the same model single-process in plain PyTorch and compares loss by loss.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import scipy.sparse as sp
import torch
from mpi4py import MPI

import spmmgnn
from spmmgnn.algorithms import Plexus3D
from spmmgnn.data.csbm import csbm
from spmmgnn.training import TrainConfig, Trainer, distribute_graph

GRAPH = dict(n=61, avg_degree=4.0, num_features=7, num_classes=3, homophily=0.6, signal=1.0,
             seed=7)
MODEL = dict(model="gcn", layers=3, hidden=6, dropout=0.5, input_dropout=0.2, layernorm=False,
             directed=True, epochs=3)

comm = MPI.COMM_WORLD
torch.set_num_threads(1)
spmmgnn.set_threads(1)


def graph():
    """The CSBM graph less a random 30 % of its edges, one direction at a time (as
    ``train_parity.py`` and the reference in ``test_training.py`` drop them)."""
    g = csbm(**GRAPH)
    A = g.adj.tocoo()
    keep = np.random.default_rng(3).random(A.nnz) < 0.7
    g.adj = sp.csr_array((A.data[keep], (A.row[keep], A.col[keep])), shape=A.shape)
    g.directed = True
    return g


def main(path: str, shape: str) -> None:
    grid = Plexus3D.grid_for(comm, shape=shape)
    data = distribute_graph(graph() if comm.rank == 0 else None, grid, "gcn",
                            algorithm="plexus3d")
    cfg = TrainConfig(model="gcn", layers=MODEL["layers"], hidden=MODEL["hidden"],
                      dropout=MODEL["dropout"], input_dropout=MODEL["input_dropout"],
                      layernorm=False, lr=0.01, weight_decay=5e-4, epochs=MODEL["epochs"],
                      seed=5, progress=False, eval_every=MODEL["epochs"])
    out = Trainer(data, cfg).fit()
    cases = [dict(MODEL, trainer="rows", grid=list(grid.shape),
                  losses=[h["loss"] for h in out["history"]], symmetric=data.op.symmetric)]
    if comm.rank == 0:
        with open(path, "w") as fh:
            json.dump(dict(graph=GRAPH, cases=cases), fh)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
