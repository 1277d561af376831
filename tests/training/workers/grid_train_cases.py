"""MPI worker: GCN training with the activations in SUMMA's block layout (``grid_layout``).

Usage: mpiexec -n P python grid_train_cases.py OUT.json SHAPE   (SHAPE like 2x2, 3x3, 2x2x2)
On a symmetric and a directed CSBM graph (n not divisible by the grid, uneven blocks, one
empty), a 3-layer GCN with dropout trains 3 epochs with ``oblivious2d`` twice, in the block
layout and in the row layout, and once on rank 0 alone (P = 1, ``sparse1d``). Rank 0 writes
per case: the losses of the three runs and, per rank, the bytes of epochs 2 and 3 by phase
(algorithm, convert) next to CAGNET's formula computed here from scipy alone and to the
volume model's (``benchmark.kept_volumes``, what ``spmmgnn model`` prices), and
every rank's error for a model the block layout refuses.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch
from mpi4py import MPI

import spmmgnn
from spmmgnn.benchmark.kept_volumes import kept_step
from spmmgnn.benchmark.volumes import Layout
from spmmgnn.data.csbm import csbm
from spmmgnn.data.normalize import normalize
from spmmgnn.grid import parse_grid
from spmmgnn.nn.layers import aggregate_first
from spmmgnn.stages import stage_ranges
from spmmgnn.training import TrainConfig, Trainer, distribute_graph

# the workers tests of several folders share (tests/workers/), imported as siblings
sys.path.insert(1, str(Path(__file__).resolve().parents[2] / "workers"))
from common import message, one_way  # noqa: E402

comm = MPI.COMM_WORLD
P = comm.size
torch.set_num_threads(1)
spmmgnn.set_threads(1)
EPOCHS = 3
MODEL = dict(model="gcn", layers=3, hidden=9, dropout=0.5, lr=0.01, weight_decay=5e-4,
             epochs=EPOCHS, seed=5, progress=False)


def graph(directed: bool):
    g = csbm(n=12 * P + 5, avg_degree=5.0, num_features=7, num_classes=5, homophily=0.6,
             signal=1.0, seed=7)
    return one_way(g) if directed else g


def block_sizes(n: int) -> list[int]:
    sizes = np.random.default_rng(P).integers(5, 12, P)
    sizes[P // 2] = 0                                  # an empty block
    sizes[-1] += n - sizes.sum()
    return sizes.tolist()


def cagnet_epoch(A, offsets, shape, dims, symmetric: bool, itemsize: int = 4):
    """Per rank (i, j, l): (algorithm bytes, convert bytes) of one training epoch of a GCN
    with the cached first aggregation, from scipy alone. Part (i pc + j) pl + l is rank
    (i, j, l)'s; U_kl: the rows of parts (k, ., l), V_i: of parts (i, ., .). SpMM at width f:
    the stage tiles A[V_i, U_kl] it holds (k = j mod pc), 8 + itemsize bytes per non-zero to
    the pc - 1 others of its row; forward its block H[U_il, F_j] to the pr - 1 others of its
    column, transposed its partial block of each other stage k to that stage's root; 3D:
    forward the reduce-scatter of Z[V_i, F_j] over the fiber (all but its share U_il),
    transposed the all-gather of its block to the pl - 1 others. H W: its block to the
    pc - 1 others of its row (CAGNET's summa_loc), forward H, backward the output gradient.
    The logits to rows and their gradient back are the conversions."""
    pr, pc, pl = (*shape, 1)[:3]
    A = sp.csr_array(A)
    sizes = np.diff(offsets)
    part = np.arange(pr * pc * pl).reshape(pr, pc, pl)
    owner = np.repeat(np.arange(sizes.size), sizes)   # the part of each vertex
    u = np.array([[sizes[part[k, :, l]].sum() for l in range(pl)] for k in range(pr)])
    out = []
    for i in range(pr):
        rows = A[offsets[part[i, 0, 0]]:offsets[part[i, -1, -1] + 1]]
        v_i = int(rows.shape[0])
        for j in range(pc):
            for l in range(pl):
                tiles = sum(int(np.isin(owner[rows.indices], part[k, :, l]).sum())
                            for k in range(pr) if k % pc == j)

                def width(f, j=j):
                    return int(np.diff(stage_ranges(f, pc))[j])

                def spmm(f, back, i=i, l=l, tiles=tiles, v_i=v_i, width=width):
                    if back and not symmetric:
                        h = u[:, l].sum() - u[i, l] + (pl > 1) * u[i, l] * (pl - 1)
                    else:
                        h = (pr - 1) * u[i, l] + (pl > 1) * (v_i - u[i, l])
                    return tiles * (8 + itemsize) * (pc - 1) + int(h) * width(f) * itemsize

                def gather(f, i=i, l=l, width=width):
                    return int(u[i, l]) * width(f) * itemsize * (pc - 1)

                alg = 0
                for f_in, f_out in zip(dims[1:-1], dims[2:], strict=True):
                    if aggregate_first(f_in, f_out, True, True):
                        alg += spmm(f_in, False) + gather(f_in) + gather(f_out) \
                            + spmm(f_in, True)
                    else:
                        alg += gather(f_in) + spmm(f_out, False) + spmm(f_out, True) \
                            + gather(f_out)
                c, me = dims[-1], part[i, j, l]
                n_me = int(sizes[me])
                convert = ((int(u[i, l]) - n_me) * width(c) + n_me * (c - width(c))) * itemsize
                out.append([int(alg), int(convert)])
    return out


def run(g, grid, sizes, algorithm, layout):
    data = distribute_graph(g, grid, "gcn", algorithm=algorithm, partition=sizes)
    trainer = Trainer(data, TrainConfig(grid_layout=layout, **MODEL))
    losses, phases = [], []
    for epoch in range(1, EPOCHS + 1):
        before = data.op.comm_stats()
        losses.append(trainer.train_step(epoch)["loss"])
        after = data.op.comm_stats()
        phases.append([after["bytes_sent_by_phase"][k] - before["bytes_sent_by_phase"][k]
                       for k in ("algorithm", "convert")])
    acc = trainer.evaluate()
    return data, losses, phases, acc


def refused(data) -> list | None:
    """Every rank's error for a model the block layout does not run (GraphSAGE)."""
    return message(lambda: Trainer(data, TrainConfig(grid_layout=True,
                                                     **dict(MODEL, model="sage"))))


def main(path: str, text: str) -> None:
    shape = parse_grid(text)
    cases = []
    for directed in (False, True):
        g = graph(directed)
        sizes = block_sizes(g.n)
        grid = spmmgnn.ProcessGrid(comm, shape=shape)
        family = f"oblivious{len(shape)}d"
        data, blocks, phases, acc = run(g if comm.rank == 0 else None, grid, sizes, family,
                                        True)
        _, rows, row_phases, row_acc = run(g if comm.rank == 0 else None, grid, sizes, family,
                                           False)
        errors = refused(data) if not directed else None
        ranks = comm.gather(phases, root=0)
        row_ranks = comm.gather(row_phases, root=0)
        if comm.rank == 0:
            one = spmmgnn.ProcessGrid(MPI.COMM_SELF)
            _, single, _, single_acc = run(g, one, None, "sparse1d", False)
            A = normalize(g.adj, "gcn")
            dims = [g.features.shape[1]] + [MODEL["hidden"]] * (MODEL["layers"] - 1) \
                + [int(g.num_classes)]
            formula = cagnet_epoch(A, np.asarray(data.op.row_offsets), shape, dims,
                                   bool(data.op.symmetric))
            step = kept_step(family, Layout.build(A, sizes, P), P, dims, 4,
                             bool(data.op.symmetric), True, shape)   # spmmgnn model's
            cases.append(dict(directed=directed, symmetric=bool(data.op.symmetric),
                              n=g.n, sizes=sizes, blocks=blocks, rows=rows, single=single,
                              ranks=ranks, row_ranks=row_ranks, formula=formula,
                              model=np.stack([step.algorithm, step.convert], 1).tolist(),
                              acc=acc, row_acc=row_acc, single_acc=single_acc,
                              errors=errors))
    if comm.rank == 0:
        with open(path, "w") as fh:
            json.dump(dict(shape=list(shape), cases=cases), fh)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
