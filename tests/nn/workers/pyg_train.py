"""MPI worker: train on a PyG ``Data`` passed in-process; rank 0 writes the summary.

Usage: mpiexec -n P python pyg_train.py OUT.json
"""

from __future__ import annotations

import json
import sys

import numpy as np
import torch
from mpi4py import MPI
from torch_geometric.data import Data

from spmmgnn import ProcessGrid
from spmmgnn.data.csbm import csbm
from spmmgnn.training import TrainConfig, Trainer, distribute_graph

comm = MPI.COMM_WORLD
data = None
if comm.rank == 0:
    g = csbm(n=300, avg_degree=6.0, num_features=8, num_classes=3, seed=4)
    A = g.adj.tocoo()
    data = Data(x=torch.from_numpy(g.features), y=torch.from_numpy(g.labels),
                edge_index=torch.from_numpy(np.vstack([A.col, A.row]).astype(np.int64)),
                **{f"{s}_mask": torch.from_numpy(g.masks[s]) for s in ("train", "val", "test")})
local = distribute_graph(data, ProcessGrid(), "gcn", dtype=torch.float64)
trainer = Trainer(local, TrainConfig(epochs=5, hidden=8, dtype="float64", seed=2,
                                     checkpoint=None))
summary = trainer.fit()
if comm.rank == 0:
    with open(sys.argv[1], "w") as fh:
        json.dump(dict(final=summary["final"], n=summary["n"], nnz=summary["nnz"]), fh)
