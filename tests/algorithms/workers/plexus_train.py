"""MPI worker: GCN training with ``--algorithm plexus3d`` on one 3D grid, 3 epochs, dropout on.

Usage: mpiexec -n P python plexus_train.py OUT.json SHAPE   (SHAPE like 2x3x2)
A tiny directed CSBM graph (n = 61: no grid axis divides it, A not symmetric); rank 0 writes
{"graph": ..., "cases": [{model config, trainer, grid, losses, ...}]}: the row-layout trainer
("rows": every SpMM converts from and to the row layout) and Plexus's layout ("plexus",
``TrainConfig.plexus_blocks`` = 1 and 3 row blocks), with each rank's bytes of the last
epoch by phase and the bytes of converting one logits matrix (to rows and back) alone.
The test trains the same model single-process in plain PyTorch and compares loss by loss.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
from mpi4py import MPI

import spmmgnn
from spmmgnn.algorithms import Plexus3D
from spmmgnn.benchmark.kept_volumes import kept_step
from spmmgnn.benchmark.volumes import Layout
from spmmgnn.data.csbm import csbm
from spmmgnn.data.normalize import normalize
from spmmgnn.training import TrainConfig, Trainer, distribute_graph

# the workers tests of several folders share (tests/workers/), imported as siblings
sys.path.insert(1, str(Path(__file__).resolve().parents[2] / "workers"))
from common import one_way  # noqa: E402

GRAPH = dict(n=61, avg_degree=4.0, num_features=7, num_classes=3, homophily=0.6, signal=1.0,
             seed=7)
MODEL = dict(model="gcn", layers=3, hidden=6, dropout=0.5, input_dropout=0.2, layernorm=False,
             directed=True, epochs=3)

comm = MPI.COMM_WORLD
torch.set_num_threads(1)
spmmgnn.set_threads(1)


def graph():
    """The CSBM graph less a random 30 % of its edges, one direction at a time (as
    ``train_parity.py`` and the reference in ``tests/training/test_training.py`` drop them)."""
    return one_way(csbm(**GRAPH))


def logits_convert(trainer: Trainer) -> dict:
    """Bytes this rank sends in one epoch of Plexus's layout, by phase, and in converting
    a logits matrix (its width) from the blocks to rows and the gradient back, alone."""
    op, d = trainer.data.op, trainer.data
    op.reset_stats()
    trainer.train_step(99)
    epoch = dict(op.comm_stats()["bytes_sent_by_phase"])
    op.reset_stats()
    c = d.num_classes
    block = op.rows.to_blocks(np.zeros((op.n_local, c), dtype=np.float32))
    op.rows.to_rows(block, np.zeros((op.n_local, c), dtype=np.float32))
    alone = op.comm_stats()["bytes_sent_by_phase"]["convert"]
    return dict(epoch=epoch, logits=alone)


def main(path: str, shape: str) -> None:
    grid = Plexus3D.grid_for(comm, shape=shape)
    data = distribute_graph(graph() if comm.rank == 0 else None, grid, "gcn",
                            algorithm="plexus3d")
    cfg = TrainConfig(model="gcn", layers=MODEL["layers"], hidden=MODEL["hidden"],
                      dropout=MODEL["dropout"], input_dropout=MODEL["input_dropout"],
                      layernorm=False, lr=0.01, weight_decay=5e-4, epochs=MODEL["epochs"],
                      seed=5, progress=False, eval_every=MODEL["epochs"])
    cases = []
    for trainer, blocks in (("rows", 0), ("plexus", 1), ("plexus", 3)):
        cfg.plexus_blocks = blocks
        t = Trainer(data, cfg)
        out = t.fit()
        s = data.op.comm_stats()   # bytes of the last epoch (fit ran its evaluation after)
        last = out["history"][-1]
        ranks = comm.gather(dict(epoch=last["bytes_sent"], convert=logits_convert(t)), root=0)
        cases.append(dict(MODEL, trainer=trainer, row_blocks=blocks, grid=list(grid.shape),
                          losses=[h["loss"] for h in out["history"]], final=out["final"],
                          symmetric=data.op.symmetric, ranks=ranks,
                          phases=list(s["bytes_sent_by_phase"])))
    if comm.rank == 0:   # spmmgnn model's step in Plexus's blocks (benchmark.kept_volumes)
        dims = [GRAPH["num_features"]] + [MODEL["hidden"]] * (MODEL["layers"] - 1) \
            + [GRAPH["num_classes"]]
        layout = Layout.build(normalize(graph().adj, "gcn"), list(np.diff(data.op.row_offsets)),
                              comm.size)
        step = kept_step("plexus3d", layout, comm.size, dims, 4, shape=tuple(grid.shape))
        model = np.stack([step.algorithm, step.convert], 1).tolist()
        with open(path, "w") as fh:
            json.dump(dict(graph=GRAPH, cases=cases, model=model), fh)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
