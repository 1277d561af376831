"""MPI worker (2 ranks): ranks that disagree on a call, and inputs numpy cannot hold, end in
one collective SpmmgnnError, never a hang or wrong rows (issue 41).

Usage: python disagree.py OUT.json

For every algorithm (1.5D ones at c = 2, 2D/3D on their default grid): rank 0 calls
``matmul`` while rank 1 calls ``matmul_t``; ``gather_rows`` with root= 0 and 1, and with
side= output and input; ``scatter_rows`` with different roots; ``scatter_rows`` on rank 0
while rank 1 calls ``gather_rows``; a bfloat16 tensor on rank 0 only, a meta tensor on rank 1
only; ``matmul`` against ``dot``, ``gram`` against ``gather_rows``, ``norm`` against
``allreduce`` (the row algebra's calls meet the others in the operator's one call probe).
After the errors, a correct ``matmul`` is compared with scipy (no rank was left behind,
the operator still works). Then ``from_edge_index`` with a bfloat16 / meta edge_index, 10**12
vertices, negative weights under gcn normalization, and weights near 1e308 (normalized: must
be finite and equal to the scaled problem's, on the root and the block-row path); HDF5 files
with a bad perm or negative weights, and a model too large for the node. Rank 0 writes
{case: [message per rank]} and the numeric checks.
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
from spmmgnn import SpmmgnnError
from spmmgnn.algorithms import ALGORITHMS

comm = MPI.COMM_WORLD
rank = comm.Get_rank()


def caught(fn) -> str | None:
    try:
        fn()
    except SpmmgnnError as exc:
        return f"collective={exc.collective}: {exc}"
    return None


def operator_cases(name: str, A, X) -> dict:
    cls = ALGORITHMS[name]
    grid = cls.grid_for(comm, 2 if "1.5d" in cls.grid_kinds else 1)
    op = spmmgnn.DistSpMM.from_scipy(A if rank == 0 else None, grid, algorithm=name)
    x = op.scatter_rows(X if rank == 0 else None)
    y = np.ones((op.n_local, 3))
    z = op.matmul(x)
    full = X if rank == 0 else None
    cases = dict(
        matmul_vs_matmul_t=caught(lambda: op.matmul(x) if rank == 0 else op.matmul_t(y)),
        gather_root=caught(lambda: op.gather_rows(z, root=rank)),
        gather_side=caught(lambda: op.gather_rows(z) if rank == 0 else
                           op.gather_rows(np.ones((op.n_local_in, 3)), side="input")),
        scatter_root=caught(lambda: op.scatter_rows(full, root=rank)),
        gather_bad_side=caught(lambda: op.gather_rows(z, side="bogus" if rank else "output")),
        gather_bad_root=caught(lambda: op.gather_rows(z, root=5 if rank == 0 else 0)),
        scatter_vs_gather=caught(lambda: op.scatter_rows(full) if rank == 0 else
                                 op.gather_rows(z)),
        matmul_vs_dot=caught(lambda: op.matmul(x) if rank == 0 else op.dot(x, x)),
        gram_vs_gather=caught(lambda: op.gram(x) if rank == 0 else op.gather_rows(z)),
        norm_vs_allreduce=caught(lambda: op.norm(x) if rank == 0 else op.allreduce(1.0)),
        bfloat16=caught(lambda: op.matmul(torch.from_numpy(x).to(torch.bfloat16)
                                          if rank == 0 else torch.from_numpy(x))),
        meta=caught(lambda: op.gather_rows(torch.from_numpy(z) if rank == 0 else
                                           torch.empty(z.shape, device="meta"))),
    )
    got = op.gather_rows(op.matmul(x))
    error = float(np.abs(got - A @ X).max()) if rank == 0 else 0.0
    return dict(cases=cases, error=error)


def edge_index_cases() -> dict:
    ei = np.array([[0, 1, 2, 3, 1], [1, 2, 3, 0, 3]])
    make = spmmgnn.DistSpMM.from_edge_index
    mine = torch.from_numpy(ei)
    w = np.array([1.0, -5.0, 1.0, 1.0, 1.0])
    return dict(
        edge_index_bfloat16=caught(lambda: make(mine.to(torch.bfloat16), 4)),
        edge_index_meta=caught(lambda: make(torch.empty(2, 5, dtype=torch.long,
                                                        device="meta"), 4)),
        num_nodes_1e12=caught(lambda: make(ei, 10**12)),
        negative_gcn=caught(lambda: make(ei, 4, edge_weight=w, normalize="gcn")),
        negative_mean=caught(lambda: make(ei, 4, edge_weight=w, normalize="mean")),
    )


def huge_weights() -> dict:
    """Weights near 1e308 normalized: finite, and equal to the problem scaled by 2**-1022
    (self loops scaled too) computed directly."""
    ei = np.array([[0, 1, 2, 3, 1, 2], [1, 2, 3, 0, 3, 0]])
    w = np.array([1.7e308, 1.0e308, 0.5e308, 1.2e308, 1.7e308, 0.9e308])
    out = {}
    for kind in ("gcn", "mean"):
        op = spmmgnn.DistSpMM.from_edge_index(ei, 4, edge_weight=w, normalize=kind)
        got = op.gather_rows(op.matmul(np.eye(4)[op.row_ids()].copy()))
        if rank == 0:
            s = 2.0**-1022
            A = sp.csr_array((w * s, (ei[1], ei[0])), shape=(4, 4)).toarray()
            if kind == "gcn":
                A = A + np.eye(4) * s
                d = A.sum(axis=1) ** -0.5
                ref = d[:, None] * A * d[None, :]
            else:
                ref = A / A.sum(axis=1, keepdims=True)
            out[kind] = dict(finite=bool(np.isfinite(got).all()),
                             error=float(np.abs(got - ref).max()))
    # the block-row path (HDF5 training) against the offline one, same weights
    from spmmgnn.data.normalize import normalize, normalize_block_row

    A = sp.csr_array((w, (ei[1], ei[0])), shape=(4, 4))
    offsets = np.array([0, 1, 4])
    lo, hi = offsets[rank], offsets[rank + 1]
    for kind in ("gcn", "mean"):
        mine = normalize_block_row(A[lo:hi], kind, offsets, comm).toarray()
        diff = float(np.abs(mine - normalize(A, kind).toarray()[lo:hi]).max())
        finite = bool(np.isfinite(mine).all())
        diffs = comm.gather((diff, finite), root=0)
        if rank == 0:
            out[f"{kind}_block_rows"] = dict(finite=all(f for _, f in diffs),
                                             error=max(d for d, _ in diffs))
    return out


def data_cases(folder: Path) -> dict:
    """Bad data on the HDF5 block-row path (a perm with a duplicate id, one with ids of
    10**12, negative weights in rank 1's block row) and a model too large for the node."""
    from spmmgnn.data.csbm import csbm
    from spmmgnn.data.h5graph import write_graph
    from spmmgnn.training import TrainConfig, Trainer, distribute_graph, load_h5_distributed

    g = csbm(n=300, avg_degree=6, num_features=8, num_classes=4, seed=5)
    A = g.adj.astype(np.float64)
    A.data[A.indptr[200]:A.indptr[201]] = -3.0  # vertex 200: rank 1's rows
    files = dict(perm_duplicate=dict(perm=np.r_[np.arange(299), 17]),
                 perm_1e12=dict(perm=np.arange(300) + 10**12),
                 negative_weights=dict(adj=A))
    if rank == 0:
        for name, change in files.items():
            arrays = dict(adj=g.adj, features=g.features, labels=g.labels, masks=g.masks,
                          num_classes=4)
            arrays.update(change)
            write_graph(folder / f"{name}.h5", arrays.pop("adj"), offsets=[0, 130, 300],
                        **arrays)
    comm.Barrier()
    grid = spmmgnn.ProcessGrid(comm)
    out = {name: caught(lambda name=name: load_h5_distributed(folder / f"{name}.h5", grid,
                                                              "gcn"))
           for name in files}
    data = distribute_graph(g if rank == 0 else None, grid, "gcn")
    out["hidden_1e9"] = caught(lambda: Trainer(data, TrainConfig(hidden=10**9,
                                                                 progress=False)))
    return out


def main(path: str) -> None:
    rng = np.random.default_rng(4)
    A = sp.random(37, 37, density=0.15, random_state=5, format="csr")  # A != A.T
    X = rng.standard_normal((37, 3))
    result = {name: operator_cases(name, A, X) for name in ALGORITHMS}
    result["edge_index"] = dict(cases=edge_index_cases(), error=0.0)
    result["data"] = dict(cases=data_cases(Path(path).parent), error=0.0)
    weights = huge_weights()
    messages = comm.gather(result, root=0)
    if rank == 0:
        merged = {name: dict(error=r["error"],
                             cases={c: [m[name]["cases"][c] for m in messages]
                                    for c in r["cases"]})
                  for name, r in result.items()}
        with open(path, "w") as fh:
            json.dump(dict(operators=merged, huge_weights=weights), fh)


if __name__ == "__main__":
    main(sys.argv[1])
