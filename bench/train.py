"""Epoch time of full-batch GCN training: spmmgnn over MPI vs PyTorch Geometric's GCNConv
(the stock baseline) and a tuned ``torch.sparse`` GCN.

Same graph (CSBM, ~100k vertices, ~2M non-zeros, 128 features, 8 classes), same model
(2 GCN layers, hidden 16 or 128, ReLU, dropout 0.5 between the layers, Adam lr 0.01 with
weight decay 5e-4), same cores: spmmgnn with P ranks x T threads against PyG in one process
with P*T torch threads, on a CSR adjacency (``torch.sparse_csr_tensor``, normalization by
``GCNConv(cached=True)``). An epoch is zero-grad + forward + loss + backward + optimizer step;
the median over the timed epochs is reported, after warm-up epochs (JIT, caches).

spmmgnn runs twice: ``cache`` (default: the first layer's aggregation of the constant input
features is computed once) and ``no-cache`` (every layer multiplies by Â every epoch, the
same work as GCNConv). Baselines, labelled as such in the output:

- ``pyg`` **stock**: ``GCNConv(cached=True)`` as a PyG user writes it (no first-layer cache:
  compare with our ``no-cache``);
- ``torch`` **tuned**: a hand-written GCN on ``torch.sparse.mm`` that keeps CSR of Â *and* Âᵀ
  (the backward is a CSR product too, no COO transpose per step), picks the cheaper
  aggregation order per layer like ours, and runs with and without the first-layer cache, so
  each of our variants has a baseline doing the same products.

Runs are sequential -- never two at once.

    python -m bench.train                      # all settings, writes bench/results/train.json
    python -m bench.train --hidden 16 --quick  # fewer epochs
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import RESULTS, ROOT
from spmmgnn.benchmark.harness import (
    LaunchError,
    machine,
    python_module,
    run,
    run_mpi,
    threads_env,
    write_json,
)


def graph(args):
    from spmmgnn.data.csbm import csbm

    return csbm(n=args.n, avg_degree=args.degree, num_features=args.features,
                num_classes=args.classes, seed=args.seed)


def worker_ours(args) -> dict | None:
    import torch
    from mpi4py import MPI

    import spmmgnn
    from spmmgnn.training import TrainConfig, Trainer, distribute_graph

    comm = MPI.COMM_WORLD
    spmmgnn.set_threads(args.threads)
    torch.set_num_threads(args.threads)
    g = graph(args) if comm.rank == 0 else None
    grid = spmmgnn.ProcessGrid(comm)
    data = distribute_graph(g, grid, "gcn", algorithm=args.algorithm)
    cfg = TrainConfig(model="gcn", layers=2, hidden=args.hidden, dropout=0.5, lr=0.01,
                      weight_decay=5e-4, epochs=args.warmup + args.epochs, eval_every=0,
                      progress=False, cache_input_aggregation=not args.no_cache)
    out = Trainer(data, cfg).fit()
    if comm.rank != 0:
        return None
    timed = out["history"][args.warmup:]
    keys = out["breakdown"].keys()
    return dict(system="spmmgnn", variant="no-cache" if args.no_cache else "cache",
                P=comm.size, threads=args.threads, cores=comm.size * args.threads,
                hidden=args.hidden, n=out["n"], nnz=out["nnz"], algorithm=args.algorithm,
                epoch_seconds=float(np.median([h["seconds"] for h in timed])),
                breakdown={k: float(np.median([h["breakdown"][k] for h in timed]))
                           for k in keys},
                final_loss=out["history"][-1]["loss"])


def worker_pyg(args) -> dict:
    import torch
    import torch.nn.functional as F
    from torch_geometric.nn import GCNConv

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    g = graph(args)
    A = g.adj.tocsr()
    adj = torch.sparse_csr_tensor(torch.from_numpy(A.indptr.astype(np.int64)),
                                  torch.from_numpy(A.indices.astype(np.int64)),
                                  torch.from_numpy(A.data.astype(np.float32)), size=A.shape)
    x = torch.from_numpy(g.features)
    y = torch.from_numpy(g.labels)
    train = torch.from_numpy(g.masks["train"])

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = GCNConv(x.shape[1], args.hidden, cached=True)
            self.conv2 = GCNConv(args.hidden, g.num_classes, cached=True)

        def forward(self, x, adj):
            h = F.dropout(F.relu(self.conv1(x, adj)), 0.5, self.training)
            return self.conv2(h, adj)

    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    times = []
    for _ in range(args.warmup + args.epochs):
        t0 = time.perf_counter()
        model.train()
        opt.zero_grad()
        loss = F.cross_entropy(model(x, adj)[train], y[train])
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    import torch_geometric

    return dict(system="pyg", variant=f"stock GCNConv CSR (PyG {torch_geometric.__version__})",
                P=1, threads=args.threads, cores=args.threads, hidden=args.hidden, n=g.n,
                nnz=int(A.nnz), epoch_seconds=float(np.median(times[args.warmup:])),
                final_loss=float(loss.detach()))


def worker_torch(args) -> dict:
    """The tuned torch.sparse GCN: CSR of Â and Âᵀ, the same products as spmmgnn."""
    import torch
    import torch.nn.functional as F

    from spmmgnn.data.normalize import normalize

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    g = graph(args)
    A = normalize(g.adj.tocsr(), "gcn").tocsr()

    def csr(M):
        M = M.tocsr()
        return torch.sparse_csr_tensor(torch.from_numpy(M.indptr.astype(np.int64)),
                                       torch.from_numpy(M.indices.astype(np.int64)),
                                       torch.from_numpy(M.data.astype(np.float32)),
                                       size=M.shape)

    adj, adj_t = csr(A), csr(A.T)

    class Aggregate(torch.autograd.Function):
        @staticmethod
        def forward(ctx, h):
            return torch.sparse.mm(adj, h)

        @staticmethod
        def backward(ctx, grad):
            return torch.sparse.mm(adj_t, grad)

    x = torch.from_numpy(g.features)
    y = torch.from_numpy(g.labels)
    train = torch.from_numpy(g.masks["train"])
    w1 = torch.nn.Parameter(torch.nn.init.xavier_uniform_(torch.empty(x.shape[1], args.hidden)))
    b1 = torch.nn.Parameter(torch.zeros(args.hidden))
    w2 = torch.nn.Parameter(torch.nn.init.xavier_uniform_(
        torch.empty(args.hidden, g.num_classes)))
    b2 = torch.nn.Parameter(torch.zeros(g.num_classes))
    cached = None if args.no_cache else Aggregate.apply(x)

    def layer(h, w, b, first=None):
        if first is not None:
            return first @ w + b
        if w.shape[1] < w.shape[0]:  # aggregate the narrower side, as spmmgnn does
            return Aggregate.apply(h @ w) + b
        return Aggregate.apply(h) @ w + b

    opt = torch.optim.Adam([w1, b1, w2, b2], lr=0.01, weight_decay=5e-4)
    times = []
    for _ in range(args.warmup + args.epochs):
        t0 = time.perf_counter()
        opt.zero_grad()
        h = F.dropout(F.relu(layer(x, w1, b1, cached)), 0.5, True)
        loss = F.cross_entropy(layer(h, w2, b2)[train], y[train])
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    return dict(system="torch", variant="tuned CSR A, A^T " + ("no-cache" if args.no_cache
                                                               else "cache"),
                P=1, threads=args.threads, cores=args.threads, hidden=args.hidden, n=g.n,
                nnz=int(A.nnz), epoch_seconds=float(np.median(times[args.warmup:])),
                final_loss=float(loss.detach()))


def launch(kind: str, P: int, threads: int, hidden: int, args, extra=()) -> dict | None:
    """One run in a fresh process (mpiexec for spmmgnn); returns its result row."""
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "r.json"
        cmd = python_module("bench.train", "--worker", kind, "--result", str(result),
                            "--threads", str(threads), "--hidden", str(hidden), "--n",
                            str(args.n), "--degree", str(args.degree), "--features",
                            str(args.features), "--classes", str(args.classes), "--epochs",
                            str(args.epochs), "--warmup", str(args.warmup), "--seed",
                            str(args.seed), "--algorithm", args.algorithm, *extra)
        env = threads_env(threads)
        if args.passive:
            env["OMP_WAIT_POLICY"] = "PASSIVE"
        try:
            if kind == "ours":
                run_mpi(P, cmd, env=env, timeout=args.timeout, cwd=ROOT)
            else:
                run(cmd, env=env, timeout=args.timeout, cwd=ROOT)
        except LaunchError as exc:
            print(f"  failed: {exc}", file=sys.stderr)
            return None
        return json.loads(result.read_text())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--worker", choices=["ours", "pyg", "torch"], help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    p.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--no-cache", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--hidden", type=int, nargs="+", default=[16, 128])
    p.add_argument("--n", type=int, default=100_000)
    p.add_argument("--degree", type=float, default=20.0)
    p.add_argument("--features", type=int, default=128)
    p.add_argument("--classes", type=int, default=8)
    p.add_argument("--epochs", type=int, default=20, help="timed epochs")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--algorithm", default="sparse1d")
    p.add_argument("--cores", type=int, nargs="+", default=[1, 2])
    p.add_argument("--no-pyg", action="store_true", help="skip PyTorch Geometric")
    p.add_argument("--passive", action=argparse.BooleanOptionalAction, default=True,
                   help="OMP_WAIT_POLICY=PASSIVE for every run (numba's and torch's OpenMP "
                        "pools otherwise spin against each other with >1 thread per process)")
    p.add_argument("--quick", action="store_true", help="5 timed epochs")
    p.add_argument("--timeout", type=float, default=1800)
    p.add_argument("--out", default=str(RESULTS / "train.json"))
    args = p.parse_args()
    if args.worker:
        args.hidden = args.hidden[0]
        row = {"ours": worker_ours, "pyg": worker_pyg, "torch": worker_torch}[args.worker](args)
        if row is not None:
            Path(args.result).write_text(json.dumps(row))
        return 0
    if args.quick:
        args.epochs = 5
    have_pyg = not args.no_pyg
    if have_pyg:
        try:
            import torch_geometric  # noqa: F401
        except ImportError:
            print("torch_geometric is not installed: spmmgnn only (pip install --no-deps "
                  "torch_geometric to compare)", file=sys.stderr)
            have_pyg = False
    rows = []
    for hidden in args.hidden:
        for cores in args.cores:
            settings = [("pyg", 1, cores, ())] if have_pyg else []
            settings += [("torch", 1, cores, ()), ("torch", 1, cores, ("--no-cache",))]
            layouts = [(cores, 1)] + ([(1, cores)] if cores > 1 else [])
            for P, t in layouts:
                settings += [("ours", P, t, ()), ("ours", P, t, ("--no-cache",))]
            for kind, P, t, extra in settings:
                row = launch(kind, P, t, hidden, args, extra)
                if row is None:
                    continue
                rows.append(row)
                print(f"hidden {hidden:>3}  cores {cores}  {row['system']:>7} P={row['P']} "
                      f"T={row['threads']} {row['variant']:<28} "
                      f"{row['epoch_seconds'] * 1e3:9.1f} ms/epoch", flush=True)
    summary = []
    for r in rows:
        if r["system"] != "spmmgnn":
            continue
        same = [b for b in rows if b["hidden"] == r["hidden"] and b["cores"] == r["cores"]]
        pyg = [b for b in same if b["system"] == "pyg"]
        tuned = [b for b in same if b["system"] == "torch"
                 and b["variant"].endswith(r["variant"])]  # same cache setting
        entry = dict(hidden=r["hidden"], cores=r["cores"], P=r["P"], threads=r["threads"],
                     variant=r["variant"])
        if pyg:
            entry["ratio_vs_stock_pyg"] = r["epoch_seconds"] / pyg[0]["epoch_seconds"]
        if tuned:
            entry["ratio_vs_tuned_torch"] = r["epoch_seconds"] / tuned[0]["epoch_seconds"]
        summary.append(entry)
    if summary:
        print("\nepoch time relative to stock PyG GCNConv and to the tuned torch.sparse GCN "
              "with the same cache setting, same core count:")
        for s in summary:
            print(f"  hidden {s['hidden']:>3}  cores {s['cores']}  P={s['P']} T={s['threads']} "
                  f"{s['variant']:<9} stock PyG {s.get('ratio_vs_stock_pyg', float('nan')):.2f}x"
                  f"  tuned torch {s.get('ratio_vs_tuned_torch', float('nan')):.2f}x")
    out = write_json(args.out, dict(machine=machine(), settings=vars(args), runs=rows,
                                    summary=summary))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
