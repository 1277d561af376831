"""A custom 3-layer GNN built from spmmgnn's layers, trained full-batch over MPI.

    mpiexec -n 2 python examples/custom_model.py --epochs 30 [--json result.json]
    mpiexec -n 4 python examples/custom_model.py --replication 2     # P = 4, c = 2 (1.5D)

What a research script does with the library: build the distributed operator from a PyG-style
``edge_index`` (source -> target), scatter the node data, assemble a model from layers whose
``forward`` takes ``(x, op)``, and train it with an ordinary torch optimizer. The weights are
replicated, so each rank sums the gradients over the rows before the step
(``spmmgnn.nn.allreduce_gradients``: one all-reduce over one replica of every block row, so
each row counts once on a 1.5D grid too), and sums the loss and counts the same way
(``op.allreduce``); the result is the same computation as on one process.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch
import torch.nn.functional as F
from mpi4py import MPI

import spmmgnn
from spmmgnn.data.csbm import csbm
from spmmgnn.nn import GCNConv, SAGEConv, allreduce_gradients, spmm


class ThreeLayer(torch.nn.Module):
    """GCN -> GraphSAGE-mean -> GCN, plus a skip term that aggregates the input once more."""

    def __init__(self, f_in: int, hidden: int, classes: int):
        super().__init__()
        self.conv1 = GCNConv(f_in, hidden)
        self.conv2 = SAGEConv(hidden, hidden)
        self.conv3 = GCNConv(hidden, classes)
        self.skip = torch.nn.Linear(f_in, classes, bias=False)

    def forward(self, x, gcn_op, mean_op):
        h = torch.relu(self.conv1(x, gcn_op))
        h = torch.relu(self.conv2(h, mean_op))
        return self.conv3(h, gcn_op) + self.skip(spmm(mean_op, x))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--n", type=int, default=2000, help="vertices of the synthetic graph")
    ap.add_argument("--replication", type=int, default=1,
                    help="replicas per block row c (a P/c x c grid, sparse15d when c > 1)")
    ap.add_argument("--json", help="rank 0 writes losses and accuracy here")
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    torch.set_default_dtype(torch.float64)

    g = csbm(n=args.n, avg_degree=8.0, num_features=16, num_classes=4, seed=1)
    A = g.adj.tocoo()  # rows are targets, columns sources
    edge_index = torch.from_numpy(np.vstack([A.col, A.row]).astype(np.int64))
    root = comm.rank == 0

    grid = spmmgnn.ProcessGrid(comm, replication=args.replication)
    algorithm = "sparse15d" if args.replication > 1 else "sparse1d"
    gcn_op = spmmgnn.DistSpMM.from_edge_index(edge_index if root else None, g.n, grid,
                                              algorithm, normalize="gcn")
    mean_op = spmmgnn.DistSpMM.from_edge_index(edge_index if root else None, g.n, grid,
                                               algorithm, normalize="mean")
    x = gcn_op.scatter_rows(torch.from_numpy(g.features).double() if root else None)
    y = gcn_op.scatter_rows(torch.from_numpy(g.labels[:, None]).double() if root else None)
    y = y[:, 0].long()
    train = gcn_op.scatter_rows(torch.from_numpy(g.masks["train"][:, None]).double()
                                if root else None)[:, 0] > 0.5
    n_train = gcn_op.allreduce(int(train.sum()))  # each row once, on any grid

    torch.manual_seed(0)  # same initial weights on every rank
    model = ThreeLayer(x.shape[1], 32, int(g.num_classes))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = []
    for _ in range(args.epochs):
        opt.zero_grad()
        logits = model(x, gcn_op, mean_op)
        loss = F.cross_entropy(logits[train], y[train], reduction="sum") / n_train
        loss.backward()
        allreduce_gradients(model.parameters(), gcn_op)
        losses.append(gcn_op.allreduce(float(loss.detach())))
        opt.step()
    with torch.no_grad():
        correct = (model(x, gcn_op, mean_op).argmax(1) == y)[train].sum()
    accuracy = gcn_op.allreduce(int(correct)) / n_train
    if root:
        print(f"ranks {comm.size}: loss {losses[0]:.4f} -> {losses[-1]:.4f}, "
              f"train accuracy {accuracy:.3f}, bytes sent by rank 0 "
              f"{gcn_op.comm_stats()['bytes_sent'] + mean_op.comm_stats()['bytes_sent']}")
        if args.json:
            with open(args.json, "w") as fh:
                json.dump(dict(losses=losses, accuracy=accuracy), fh)


if __name__ == "__main__":
    main()
