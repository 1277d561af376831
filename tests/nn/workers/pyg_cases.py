"""MPI worker: ``from_edge_index`` and the ``(x, op)`` layers against PyTorch Geometric.

Usage: mpiexec -n P python pyg_cases.py OUT.json
A directed graph with self loops on some vertices, duplicate edges and isolated vertices.
For GCN (``normalize="gcn"``, PyG ``GCNConv``) and GraphSAGE-mean (``normalize="mean"``, PyG
``SAGEConv``) with the same weights: the output, and the gradients of a fixed linear loss
w.r.t. the weights and the input, are compared with PyG on one process (float64).
Rank 0 writes the maximum absolute differences.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import torch
from mpi4py import MPI
from torch_geometric.nn import GCNConv as PygGCN
from torch_geometric.nn import SAGEConv as PygSAGE

import spmmgnn
from spmmgnn.nn import GCNConv, SAGEConv

comm = MPI.COMM_WORLD
torch.set_default_dtype(torch.float64)
N, F_IN, F_OUT = 23, 5, 4


def graph() -> tuple[torch.Tensor, torch.Tensor]:
    rng = np.random.default_rng(3)
    src, dst = rng.integers(0, 18, 70), rng.integers(0, 18, 70)  # 18..22 isolated
    keep = src != dst
    src, dst = src[keep], dst[keep]
    src = np.r_[src, [1, 4, 9], src[:5]]   # self loops on 1, 4, 9; 5 duplicate edges
    dst = np.r_[dst, [1, 4, 9], dst[:5]]
    ei = torch.from_numpy(np.vstack([src, dst]).astype(np.int64))
    w = torch.from_numpy(rng.uniform(0.5, 2.0, ei.shape[1]))
    return ei, w


def compare(kind: str, weighted: bool) -> dict:
    ei, w = graph()
    ew = w if weighted else None
    torch.manual_seed(0)
    x = torch.randn(N, F_IN)
    probe = torch.randn(N, F_OUT)
    if kind == "gcn":
        ours, theirs = GCNConv(F_IN, F_OUT), PygGCN(F_IN, F_OUT)
        with torch.no_grad():
            ours.bias.normal_()
            theirs.lin.weight.copy_(ours.weight.T)
            theirs.bias.copy_(ours.bias)
    else:
        ours, theirs = SAGEConv(F_IN, F_OUT), PygSAGE(F_IN, F_OUT, aggr="mean")
        with torch.no_grad():
            ours.bias.normal_()
            theirs.lin_l.weight.copy_(ours.weight_neigh.T)
            theirs.lin_l.bias.copy_(ours.bias)
            theirs.lin_r.weight.copy_(ours.weight_self.T)
        ew = None  # PyG's SAGEConv has no edge weights
    xr = x.clone().requires_grad_()
    ref = theirs(xr, ei, ew) if kind == "gcn" else theirs(xr, ei)
    (ref * probe).sum().backward()
    ref_grads = [p.grad for p in ([theirs.lin.weight, theirs.bias] if kind == "gcn" else
                                  [theirs.lin_r.weight, theirs.lin_l.weight, theirs.lin_l.bias])]

    op = spmmgnn.DistSpMM.from_edge_index(ei if comm.rank == 0 else None, N,
                                          edge_weight=ew if comm.rank == 0 else None,
                                          normalize="gcn" if kind == "gcn" else "mean")
    x_local = op.scatter_rows(x if comm.rank == 0 else None).requires_grad_()
    probe_local = op.scatter_rows(probe if comm.rank == 0 else None, side="output")
    out_local = ours(x_local, op)
    (out_local * probe_local).sum().backward()
    grads = [p.grad.clone() for p in ([ours.weight, ours.bias] if kind == "gcn" else
                                      [ours.weight_self, ours.weight_neigh, ours.bias])]
    for g in grads:  # the weights are replicated: their gradient is the sum over ranks
        comm.Allreduce(MPI.IN_PLACE, g.numpy(), op=MPI.SUM)
    out = op.gather_rows(out_local.detach())
    gx = op.gather_rows(x_local.grad, side="input")
    if comm.rank != 0:
        return {}
    ref = ref.detach()
    ours_t = [grads[0].T, grads[1]] if kind == "gcn" else [grads[0].T, grads[1].T, grads[2]]
    return dict(out=float((out - ref).abs().max()), grad_x=float((gx - xr.grad).abs().max()),
                grad_w=max(float((a - b).abs().max()) for a, b in zip(ours_t, ref_grads,
                                                                        strict=True)),
                scale=float(ref.abs().max()))


def main() -> None:
    results = {f"{kind}{'_weighted' if weighted else ''}": compare(kind, weighted)
               for kind, weighted in (("gcn", False), ("gcn", True), ("sage", False))}
    if comm.rank == 0:
        with open(sys.argv[1], "w") as fh:
            json.dump(results, fh)


if __name__ == "__main__":
    main()
