"""``spmmgnn spmm``: run the distributed SpMM on a generated graph, check it, report time/bytes."""

from __future__ import annotations

import json
import time

import numpy as np
from mpi4py import MPI

from ..algorithms import ALGORITHMS, DistSpMM
from ..runtime.atomic import check_writable, write_text_atomic
from ..runtime.errors import agree, check_on_root, collective_error
from ..runtime.machine import check_memory
from ..runtime.threads import default_threads, set_threads
from ..runtime.wire import bcast_json, gather_json
from . import (
    EXCHANGE_HELP,
    GRID_HELP,
    RANKS_PER_NODE_HELP,
    HelpFormatter,
    count_arg,
    file_roles,
    grid_arg,
    real_arg,
)


def add_parser(sub) -> None:
    p = sub.add_parser("spmm", help="distributed SpMM on a generated graph, checked vs scipy",
                       description=__doc__.strip(),
                       formatter_class=HelpFormatter)
    p.add_argument("--graph", choices=["rmat", "random"], default="rmat",
                   help="R-MAT (power law) or uniform random graph")
    p.add_argument("--scale", type=int, default=14, help="R-MAT scale (2**scale vertices)")
    p.add_argument("--n", type=int, default=20000, help="vertices of the random graph")
    p.add_argument("--degree", type=real_arg(0), default=16.0, help="average non-zeros per row")
    p.add_argument("-f", "--features", type=int, default=64, help="columns of X")
    p.add_argument("--algorithm", nargs="+", default=["oblivious1d", "sparse1d"],
                   choices=sorted(ALGORITHMS), help="algorithms to run, one after the other")
    p.add_argument("--replication", type=int, default=1,
                   help="c of the P/c x c grid (1D and 1.5D algorithms)")
    p.add_argument("--grid", type=grid_arg, metavar="PRxPC[xPL]", help=GRID_HELP)
    p.add_argument("--ranks-per-node", type=count_arg(1), metavar="K", help=RANKS_PER_NODE_HELP)
    p.add_argument("--exchange", choices=["flat", "node", "auto"], default="flat",
                   help=EXCHANGE_HELP + " (the other algorithms run flat)")
    p.add_argument("--dtype", choices=["float32", "float64"], default="float32",
                   help="precision of A and X")
    p.add_argument("--repeat", type=int, default=10, help="timed SpMMs (after one warm-up)")
    p.add_argument("--threads", type=count_arg(0), default=0,
                   help="threads per rank (0 = cores/ranks)")
    p.add_argument("--seed", type=int, default=0, help="seed of the graph and of X")
    p.add_argument("--device", choices=["none", "cpu", "cuda"], default="none",
                   help="where the operator's data lives: none (numpy/numba), or torch "
                        "tensors on cpu or cuda (the 1D and 1.5D algorithms; docs/gpu.md)")
    p.add_argument("--transport", choices=["mpi", "torch", "auto"], default="auto",
                   help="how the rows travel: mpi, or torch (torch.distributed: NCCL on CUDA, "
                        "Gloo on the CPU); auto: NCCL on CUDA grids of more than one rank, "
                        "MPI otherwise")
    p.add_argument("--json", help="write the results as JSON to this file")
    p.set_defaults(func=run)
    file_roles(p, outputs={"json": "--json"})


def run(args) -> int:
    from ..data.generators import random_graph, rmat

    comm = MPI.COMM_WORLD
    threads = set_threads(args.threads or default_threads(comm))
    agree(comm, None if args.repeat >= 1 and args.features >= 1 and args.n >= 1 else
          "--repeat, --features and --n must be positive")
    if args.json:
        check_on_root(comm, 0, lambda: check_writable(args.json, "--json output"))

    def build():
        A = (rmat(args.scale, int(args.degree), seed=args.seed) if args.graph == "rmat"
             else random_graph(args.n, args.degree, seed=args.seed))
        # X in float64 and its cast, the gathered result and the reference
        check_memory(8 * float(A.shape[0]) * args.features * 3, f"the {A.shape[0]} x "
                     f"{args.features} dense input and result (-f {args.features})")
        X = np.random.default_rng(args.seed).standard_normal((A.shape[0], args.features))
        return A, X.astype(args.dtype)

    A, X = check_on_root(comm, 0, build) or (None, None)
    device = {"none": None}.get(args.device, args.device)
    grids = {algo: ALGORITHMS[algo].grid_for(comm, args.replication, args.grid,
                                             args.ranks_per_node, device=device,
                                             transport=args.transport)
             for algo in args.algorithm}
    if comm.rank == 0:
        graph = (f"R-MAT scale {args.scale}" if args.graph == "rmat" else
                 f"random graph (n={args.n}, degree {args.degree:g})")
        print(f"spmmgnn spmm: {graph}: n={A.shape[0]} nnz={A.nnz} f={args.features} "
              f"{args.dtype} | P={comm.size} contiguous block rows | device={args.device}, "
              f"transport={grids[args.algorithm[0]].transport.describe()} | "
              f"threads/rank={threads} | exchange={args.exchange}, "
              f"{grids[args.algorithm[0]].node_label()} | {args.repeat} timed SpMMs after "
              "one warm-up",
              flush=True)
    results = []
    for algo in args.algorithm:
        grid = grids[algo]
        takes = ALGORITHMS[algo].takes_exchange
        op = DistSpMM.from_scipy(A, grid, algorithm=algo,
                                 exchange=args.exchange if takes else "flat")
        be = grid.backend
        x = op.scatter_rows(be.from_host(X) if comm.rank == 0 else None)
        y = op.matmul(x)  # warm-up (and numba compilation)
        op.reset_stats()
        comm.Barrier()
        t0 = time.perf_counter()
        for _ in range(args.repeat):
            y = op.matmul(x)
        be.synchronize()
        comm.Barrier()
        seconds = (time.perf_counter() - t0) / args.repeat
        stats = gather_json(comm, op.comm_stats(), root=0)
        full = op.gather_rows(y)
        if full is not None:
            full = be.to_host(full)
        if comm.rank == 0:
            ref = A.astype(args.dtype) @ X
            err = float(np.abs(full - ref).max() / max(1e-30, np.abs(ref).max()))
            row = dict(algorithm=algo, P=comm.size, c=grid.replication, device=args.device,
                       transport=grid.transport.describe(),
                       grid=None if grid.kind in ("1d", "1.5d") else list(grid.shape),
                       n=A.shape[0],
                       nnz=int(A.nnz), f=args.features, seconds_per_spmm=seconds,
                       max_rel_error=err,
                       max_bytes_sent_per_spmm=max(s["bytes_sent"] for s in stats) / args.repeat,
                       total_bytes_per_spmm=sum(s["bytes_sent"] for s in stats) / args.repeat,
                       inter_bytes_per_spmm=sum(s["bytes_sent_by_tier"]["inter"]
                                                for s in stats) / args.repeat,
                       convert_bytes_per_spmm=sum(s["bytes_sent_by_phase"]["convert"]
                                                  for s in stats) / args.repeat,
                       exchange=stats[0]["exchange"],
                       kernels=[s["kernels"] for s in stats])
            results.append(row)
            chosen = row["exchange"]["chosen"]
            how = (f"  exchange {row['exchange']['option']}"
                   + (f" ({', '.join(f'{k}: {v}' for k, v in chosen.items())})" if chosen else "")
                   if takes else "")
            print(f"{algo:>12} {grid.label():>10}: {seconds * 1e3:8.2f} ms/SpMM  max bytes "
                  "sent/rank "
                  f"{row['max_bytes_sent_per_spmm'] / 1e6:8.3f} MB  inter-node "
                  f"{row['inter_bytes_per_spmm'] / 1e6:8.3f} MB  rel. error {err:.1e}{how}",
                  flush=True)
        err = bcast_json(comm, err if comm.rank == 0 else None, root=0)
        if err > (1e-4 if args.dtype == "float32" else 1e-10):
            raise collective_error(f"{algo} disagrees with scipy (relative error {err:.2e})")
    if args.json:
        check_on_root(comm, 0, lambda: write_text_atomic(args.json, json.dumps(results, indent=2),
                                                         "--json output"))
    return 0

