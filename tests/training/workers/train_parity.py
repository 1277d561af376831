"""MPI worker: train GCN / GraphSAGE with every SpMM algorithm on a small CSBM graph.

Usage: mpiexec -n P python train_parity.py OUT.json [ALGORITHM ...]
(every algorithm by default; the 2D/3D ones on the grid of P closest to a square / cube).
Rank 0 writes {"graph": ..., "cases": [{algorithm, c, model config, losses, accuracies}]}.
The test trains the same models single-process in plain PyTorch and compares.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

import numpy as np
import torch
from mpi4py import MPI

import spmmgnn
from spmmgnn import ALGORITHMS
from spmmgnn.data.csbm import csbm
from spmmgnn.training import TrainConfig, Trainer, distribute_graph

# the workers tests of several folders share (tests/workers/), imported as siblings
sys.path.insert(1, str(Path(__file__).resolve().parents[2] / "workers"))
from common import one_way  # noqa: E402

GRAPH = dict(n=200, avg_degree=5.0, num_features=10, num_classes=4, homophily=0.6, signal=1.0,
             seed=7)
MODELS = [
    dict(model="gcn", layers=2, hidden=16, dropout=0.5, input_dropout=0.2, layernorm=True,
         partition="random"),
    dict(model="sage", layers=3, hidden=12, dropout=0.3, input_dropout=0.0, layernorm=False,
         partition="contiguous"),
    dict(model="gcn", layers=2, hidden=8, dropout=0.0, input_dropout=0.0, layernorm=False,
         partition="contiguous", cache=False, directed=True),
]
EPOCHS = 20

comm = MPI.COMM_WORLD
P = comm.size
torch.set_num_threads(1)
spmmgnn.set_threads(1)


def graph_for(spec):
    g = csbm(**GRAPH)
    return one_way(g) if spec.get("directed") else g


def partition_for(spec, k, n):
    if spec["partition"] == "random":
        return np.random.default_rng(11).integers(0, k, n)
    if spec["partition"] == "empty_block":
        sizes = [n // 2] + [0] * (k - 2) + [n - n // 2]
        return sizes
    return None


def plans():
    for name in sys.argv[2:] or sorted(ALGORITHMS):
        c = 2 if ("15d" in name and P % 2 == 0 and P >= 4) else 1
        for spec in MODELS:
            yield name, c, spec
    if P == 3:
        yield "sparse1d", 1, dict(MODELS[0], partition="empty_block")


results = []
for name, c, spec in plans():
    row = dict(algorithm=name, P=P, c=c, epochs=EPOCHS, **spec)
    try:
        grid = ALGORITHMS[name].grid_for(comm, c)
        row["grid"] = list(grid.shape)
        g = graph_for(spec) if comm.rank == 0 else None
        data = distribute_graph(g, grid, "gcn" if spec["model"] == "gcn" else "mean",
                                algorithm=name,
                                partition=partition_for(spec, grid.n_block_rows, GRAPH["n"]))
        cfg = TrainConfig(model=spec["model"], layers=spec["layers"], hidden=spec["hidden"],
                          dropout=spec["dropout"], input_dropout=spec["input_dropout"],
                          layernorm=spec["layernorm"], lr=0.01, weight_decay=5e-4,
                          epochs=EPOCHS, seed=5, progress=False, eval_every=EPOCHS,
                          cache_input_aggregation=spec.get("cache", True))
        out = Trainer(data, cfg).fit()
        row.update(losses=[h["loss"] for h in out["history"]], final=out["final"],
                   symmetric=data.op.symmetric, sizes=data.info["sizes"])
    except Exception as exc:  # report, don't hang: every rank fails the same way here
        row["error"] = f"{type(exc).__name__}: {exc}"
        if comm.rank == 0:
            traceback.print_exc()
    results.append(row)

if comm.rank == 0:
    with open(sys.argv[1], "w") as fh:
        json.dump(dict(graph=GRAPH, cases=results), fh)
