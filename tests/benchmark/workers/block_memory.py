"""MPI worker: the memory preflight's figure for the block layouts against what they hold.

Usage: mpiexec -n 4 python block_memory.py OUT.json
On a CSBM graph (n not divisible by 4, float32, a 3-layer GCN 12 -> 40 -> 40 -> 5), a
trainer in SUMMA's blocks (oblivious2d on 2x2, ``grid_layout``) and one in Plexus's
(plexus3d on 2x1x2, ``plexus_blocks`` 2). Rank 0 writes per layout and rank: the estimate
(``nn.memory.block_bytes``), the bytes of the tensors autograd saves in one training step
(saved-tensor hooks, each storage once), of the input blocks (and SUMMA's gathered ``A X``)
the layout keeps, and of Plexus's two tiles as built; and whether ``spmmgnn model
--memory``'s place of the rank (``benchmark.memory.kept_places``, from the partition alone)
is the preflight's.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import torch
from mpi4py import MPI

import spmmgnn
from spmmgnn.benchmark.memory import kept_places
from spmmgnn.benchmark.volumes import Layout
from spmmgnn.data.csbm import csbm
from spmmgnn.data.normalize import normalize
from spmmgnn.grid import parse_grid
from spmmgnn.nn.memory import ModelShape, block_bytes
from spmmgnn.training import TrainConfig, Trainer, distribute_graph

comm = MPI.COMM_WORLD
torch.set_num_threads(1)
spmmgnn.set_threads(1)
MODEL = dict(model="gcn", layers=3, hidden=40, dropout=0.5, epochs=1, seed=3, progress=False)


def saved_bytes(trainer: Trainer) -> int:
    """Bytes of the tensors autograd keeps in one training step (each storage once)."""
    seen: dict = {}

    def pack(t):
        if t.device.type == "cpu" and t.numel():
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        trainer.train_step(1)
    return int(sum(seen.values()))


def held(trainer: Trainer, kind: str) -> dict:
    """The input blocks (and gathered A X) and tiles the layout keeps, in bytes."""
    if kind == "grid":
        fwd = trainer.forward
        return dict(inputs=fwd._x[1].nbytes + (fwd._cache[1].nbytes if fwd._cache else 0),
                    tiles=0)
    plan = trainer.model.plan
    # the tile as CSR (its permutation and whole arrays; each row block's own row pointers,
    # 8 bytes a row more, are not in the estimate)
    tiles = sum(t.perm.nbytes + t.whole.indptr.nbytes + t.whole.indices.nbytes
                + t.whole.data.nbytes for t in plan.tiles)
    return dict(inputs=trainer.model._input[1].nbytes, tiles=int(tiles))


def main(path: str) -> None:
    g = csbm(n=403, avg_degree=6.0, num_features=12, num_classes=5, seed=4)
    out = {}
    for kind, algorithm, shape, extra in (("grid", "oblivious2d", "2x2", dict(grid_layout=True)),
                                          ("plexus", "plexus3d", "2x1x2",
                                           dict(plexus_blocks=2))):
        grid = spmmgnn.ProcessGrid(comm, shape=parse_grid(shape))
        data = distribute_graph(g if comm.rank == 0 else None, grid, "gcn", algorithm=algorithm)
        trainer = Trainer(data, TrainConfig(**MODEL, **extra))
        place = trainer._block_place()
        model = ModelShape(features=12, hidden=MODEL["hidden"], classes=5, layers=3)
        estimate = block_bytes(model, place)
        layout = Layout.build(normalize(g.adj, "gcn"), list(np.diff(data.op.row_offsets)),
                              comm.size)
        model_place = kept_places(algorithm, layout, comm.size, parse_grid(shape))[comm.rank]
        mine = dict(estimate=estimate, saved=saved_bytes(trainer), **held(trainer, kind),
                    block=place.block, rows=place.rows, model_place=model_place == place)
        out[kind] = comm.gather(mine, root=0)
    if comm.rank == 0:
        with open(path, "w") as fh:
            json.dump(out, fh)


if __name__ == "__main__":
    main(sys.argv[1])
