"""Distributed SpMM algorithms compared in one run: time per SpMM and bytes per rank.

Run under MPI from the repository root, e.g.  mpiexec -n 4 python -m bench.spmm --replication 1 2
For every algorithm and replication c (1D algorithms at c = 1 only) it times ``matmul``
(and ``matmul_t`` with --transpose), breaks the time into exchange / local multiply /
all-reduce (the slowest rank's, as in Figure 7 of the ICPP'24 paper), records each rank's
bytes, and reports ratios against oblivious1d. JSON out, plus a stacked-bar PNG.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from mpi4py import MPI

from bench import RESULTS
from spmmgnn import ALGORITHMS, DistSpMM, ProcessGrid, default_threads, set_threads
from spmmgnn.benchmark.harness import machine, write_json
from spmmgnn.benchmark.plots import plot_file
from spmmgnn.data.generators import random_graph, rmat


def make_graph(args):
    if args.graph == "rmat":
        return rmat(args.scale, args.edge_factor, seed=args.seed)
    return random_graph(args.n, args.edge_factor, seed=args.seed)


def partition_for(A, k: int, method: str, seed: int):
    """Rank-0 side: None (contiguous blocks) or a Partition from spmmgnn.partitioners."""
    if method == "contiguous":
        return None
    from spmmgnn.partitioners import partition

    return partition(A, k, method=method, seed=seed)


def run_one(comm, A, X, algo: str, c: int, args) -> dict | None:
    grid = ProcessGrid(comm, c)
    part = None
    if comm.rank == 0:
        part = partition_for(A, grid.n_block_rows, args.partition, args.seed)
    op = DistSpMM.from_scipy(A, grid, algorithm=algo, partition=part, validate=False)
    x = op.scatter_rows(X)
    op.matmul(x)  # warm-up: numba compilation, buffer allocation
    if args.transpose:
        op.matmul_t(x)
    op.reset_stats()
    comm.Barrier()
    t0 = time.perf_counter()
    for _ in range(args.repeat):
        y = op.matmul(x)
        if args.transpose:
            op.matmul_t(y)
    comm.Barrier()
    wall = (time.perf_counter() - t0) / args.repeat
    st = op.comm_stats()
    per_rank = comm.gather(dict(
        rank=comm.rank, block_row=grid.block_row, replica=grid.replica, rows=op.n_local,
        nnz=op.local_nnz(), bytes_sent=st["bytes_sent"] / args.repeat,
        bytes_received=st["bytes_received"] / args.repeat,
        allreduce_bytes=st["allreduce_bytes"] / args.repeat,
        exchange_s=st["seconds_exchange"] / args.repeat,
        multiply_s=st["seconds_multiply"] / args.repeat,
        allreduce_s=st["seconds_allreduce"] / args.repeat), root=0)
    if comm.rank != 0:
        return None
    sent = np.array([r["bytes_sent"] for r in per_rank])
    return dict(
        algorithm=algo, P=comm.size, c=c, f=X.shape[1], seconds_per_spmm=wall,
        exchange_s=max(r["exchange_s"] for r in per_rank),
        multiply_s=max(r["multiply_s"] for r in per_rank),
        allreduce_s=max(r["allreduce_s"] for r in per_rank),
        max_bytes_sent=float(sent.max()), avg_bytes_sent=float(sent.mean()),
        total_bytes=float(sent.sum()), ranks=per_rank)


PARTS = (("exchange_s", "exchange", "tab:red"), ("multiply_s", "multiply", "tab:blue"),
         ("allreduce_s", "allreduce", "tab:green"))


def figure(plt, rows):
    """Stacked bars per algorithm and c, a panel per width: the slowest rank's exchange,
    multiply and all-reduce per SpMM."""
    from spmmgnn.benchmark.plots import legend_outside

    widths = sorted({r["f"] for r in rows})
    fig, axes = plt.subplots(1, len(widths), figsize=(7.5 * len(widths), 4.4), squeeze=False)
    for ax, f in zip(axes[0], widths, strict=True):
        sel = [r for r in rows if r["f"] == f]
        labels = [f"{r['algorithm']}\nc={r['c']}" for r in sel]
        bottom = np.zeros(len(sel))
        for part, name, color in PARTS:
            v = np.array([r[part] * 1e3 for r in sel])
            if np.any(v > 0):
                ax.bar(labels, v, bottom=bottom, color=color, label=name)
            bottom += v
        ax.set(ylabel="ms per SpMM (slowest rank)", title=f"P={sel[0]['P']}, f={f}")
        ax.tick_params(axis="x", labelrotation=90)
        legend_outside(ax)
    return fig


def plot(rows, path) -> None:
    """``figure`` written to ``path`` (nothing without matplotlib)."""
    plot_file(path, figure, rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graph", choices=["rmat", "random"], default="rmat")
    ap.add_argument("--scale", type=int, default=17)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--edge-factor", type=int, default=8)
    ap.add_argument("-f", "--features", type=int, nargs="+", default=[16, 128])
    ap.add_argument("--algorithms", nargs="+", default=sorted(ALGORITHMS),
                    choices=sorted(ALGORITHMS))
    ap.add_argument("--replication", type=int, nargs="+", default=[1])
    ap.add_argument("--partition", default="contiguous",
                    help="contiguous, or a method of spmmgnn.partitioners")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--transpose", action="store_true", help="time matmul + matmul_t")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    threads = set_threads(args.threads or default_threads(comm))
    A = make_graph(args) if comm.rank == 0 else None
    rows = []
    for f in args.features:
        X = (np.random.default_rng(f).standard_normal((A.shape[0], f)).astype(np.float32)
             if comm.rank == 0 else None)
        for algo in args.algorithms:
            for c in args.replication:
                if comm.size % c or ("1d" in algo and c != 1):
                    continue
                row = run_one(comm, A, X, algo, c, args)
                if row:
                    rows.append(row)
                    print(f"P={comm.size} c={c} f={f:<4} {algo:>12}: "
                          f"{row['seconds_per_spmm'] * 1e3:8.2f} ms  (exchange "
                          f"{row['exchange_s'] * 1e3:.2f}, multiply {row['multiply_s'] * 1e3:.2f},"
                          f" allreduce {row['allreduce_s'] * 1e3:.2f})  max sent "
                          f"{row['max_bytes_sent'] / 1e6:.2f} MB", flush=True)
    if comm.rank == 0:
        for r in rows:
            base = [b for b in rows if b["algorithm"] == "oblivious1d" and b["f"] == r["f"]]
            if base:
                r["time_vs_oblivious1d"] = r["seconds_per_spmm"] / base[0]["seconds_per_spmm"]
                r["max_bytes_vs_oblivious1d"] = (r["max_bytes_sent"] /
                                                 max(1.0, base[0]["max_bytes_sent"]))
        out = args.out or str(RESULTS / f"spmm_P{comm.size}.json")
        path = write_json(out, dict(machine=machine(), graph=args.graph, n=int(A.shape[0]),
                                    nnz=int(A.nnz), partition=args.partition,
                                    threads_per_rank=threads, results=rows))
        plot(rows, path.with_suffix(".png"))
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
