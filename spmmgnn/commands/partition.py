"""``spmmgnn partition``: the offline partition step.

Reads any supported graph file, partitions its vertices into k block rows, and writes the
relabelled graph with the block offsets in the project's HDF5 format (what training reads
block row by block row). For the 1.5D algorithms on P ranks with replication c, partition
into P/c block rows. Serial: under mpiexec only rank 0 works.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from mpi4py import MPI

from ..runtime.atomic import check_writable, write_text_atomic
from ..runtime.errors import SpmmgnnError, check_on_root
from . import (
    PARTS_PER_NODE_HELP,
    ROW_WEIGHT_HELP,
    check_parts_per_node,
    count_arg,
    file_roles,
)

# input files from this size on announce their reading (it takes seconds)
LOUD_BYTES = 64 * 2**20
ROWS = [("total volume (rows per SpMM)", "total_volume", "{:,}"),
        ("max send volume", "max_send", "{:,}"), ("send imbalance", "send_imbalance", "{:.1%}"),
        ("max receive volume", "max_recv", "{:,}"),
        ("receive imbalance", "recv_imbalance", "{:.1%}"),
        ("max non-zeros per part", "max_nnz", "{:,}"),
        ("load imbalance", "load_imbalance", "{:.1%}")]


def add_parser(sub) -> None:
    from ..partitioners import DEFAULT_METHOD, METHODS, QUALITY_METHOD

    p = sub.add_parser(
        "partition", help="partition a graph into k block rows and write the permuted graph",
        description=__doc__.splitlines()[0] + " For 1.5D runs on P ranks with replication c, "
        "use k = P/c.")
    p.add_argument("graph", help="graph file (.mtx, .graph, edge list, .npz, .pt, .h5) or "
                   "OGB-style folder; every format: (u, v) = edge u -> v, aggregated at v")
    p.add_argument("-k", "--parts", type=int, required=True, help="number of block rows")
    p.add_argument("--method", default=DEFAULT_METHOD,
                   help=f"'{DEFAULT_METHOD}' (the default, fast: within max(3x METIS-vol's "
                   "time, 2 s), keeps the lowest max send + total / k of METIS-vol, KaMinPar "
                   f"and Mt-KaHyPar refined), '{QUALITY_METHOD}' (slower: more candidates "
                   "and levels, --time-budget; the lowest max send with the total volume "
                   "within 2 %% of the lower of METIS-vol's and Mt-KaHyPar's) or one of "
                   f"{', '.join(METHODS)}")
    p.add_argument("--parts-per-node", type=count_arg(1), metavar="K",
                   help=PARTS_PER_NODE_HELP + ", a divisor of -k")
    p.add_argument("--time-budget", type=float, default=None, metavar="SECONDS",
                   help="the presets: start no further candidate, and no further "
                   f"refinement pass, after this many seconds (default: '{DEFAULT_METHOD}' "
                   "3x METIS-vol's time, at least 2 s, Mt-KaHyPar stopped at its deadline; "
                   f"'{QUALITY_METHOD}' 20x METIS-vol's time, at least 10 s, a base "
                   "partitioner that has started finishes); 'inf': every step runs")
    p.add_argument("--from-parts", metavar="FILE", default=None,
                   help="use the part vector in FILE instead of partitioning: made outside "
                   "(dKaMinPar, ParMETIS, XtraPuLP, gpmetis), one part id per line in vertex "
                   "order, or a .npy integer array; checked (length n, values in [0, k), "
                   "integers), its metrics computed and the graph written as usual")
    p.add_argument("-o", "--output", required=True, help="output HDF5 file (.h5)")
    p.add_argument("--epsilon", type=float, default=0.03,
                   help="allowed load imbalance: max non-zeros per part <= (1+eps) x average")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None,
                   help="threads for Mt-KaHyPar and KaMinPar (default: all available cores; "
                   "'default' takes the cores idle at its start, at least one)")
    p.add_argument("--row-weight", type=count_arg(0), default=0, metavar="W",
                   help=ROW_WEIGHT_HELP)
    p.add_argument("--volume-slack", type=float, default=None, metavar="S",
                   help="+maxsend (and default): how much total volume (fraction of the "
                   "refined total, default 0.1) may be traded for a lower max send")
    p.add_argument("--json", help="also write the metrics (with per-part values) as JSON")
    p.set_defaults(func=run)
    file_roles(p, inputs={"graph": "graph", "from_parts": "--from-parts"},
               outputs={"output": "-o", "json": "--json"})


def _partition(args) -> dict:
    from ..data.loaders import load_graph
    from ..data.partitioned import source_perm, write_partitioned
    from ..partitioners.api import CONTIGUOUS, PROGRESS_AFTER, stderr_progress

    if args.parts < 1:
        raise SpmmgnnError(f"-k must be a positive number of parts, got {args.parts}")
    if args.method in CONTIGUOUS:
        raise SpmmgnnError(f"--method {args.method} does not partition; choose a partitioner")
    if args.from_parts is None:
        check_parts_per_node(args.method, args.parts_per_node, {"-k": args.parts}, "--method")
    elif args.parts_per_node is not None or args.row_weight:
        flag = "--parts-per-node" if args.parts_per_node is not None else "--row-weight"
        raise SpmmgnnError(f"{flag} goes with a partitioner, not with --from-parts (the part "
                           "vector is given)")
    for path, what in ((args.output, "graph file"), (args.json, "--json output")):
        if path:
            check_writable(path, what)
    t = time.perf_counter()
    if Path(args.graph).is_file() and Path(args.graph).stat().st_size >= LOUD_BYTES:
        stderr_progress(f"reading {args.graph}")
    g = load_graph(args.graph)
    if time.perf_counter() - t >= PROGRESS_AFTER:
        stderr_progress(f"read n={g.n:,}, nnz={g.adj.nnz:,} in "
                        f"{time.perf_counter() - t:.1f} s")
    refine = {} if args.volume_slack is None else dict(volume_slack=args.volume_slack)
    if args.parts_per_node is not None:
        refine["parts_per_node"] = args.parts_per_node
    if args.time_budget is not None:
        refine["time_budget"] = args.time_budget
    if args.row_weight:
        refine["row_weight"] = args.row_weight
    method, given = args.method, None
    if args.from_parts is not None:
        from ..data.parts_file import read_part_vector

        given = read_part_vector(args.from_parts, g.n, args.parts)
        method, refine = f"from-parts:{Path(args.from_parts).name}", {}
    P = write_partitioned(g, args.output, args.parts, method, seed=args.seed,
                          epsilon=args.epsilon, threads=args.threads,
                          original_perm=source_perm(args.graph, g.n),
                          progress=stderr_progress, part_vector=given, **refine)
    m = P.metrics
    report = dict(graph=str(args.graph), output=str(args.output), method=P.method,
                  n=g.n, matrix_nnz=int(g.adj.nnz), epsilon=args.epsilon, seed=args.seed,
                  seconds=P.seconds, block_sizes=P.sizes.tolist(), **m.as_dict(per_part=True))
    width = max(len(r[0]) for r in ROWS)
    print(f"{g.name}: n={g.n:,} nnz={g.adj.nnz:,} -> k={P.k} block rows with {P.method} "
          f"in {P.seconds:.1f} s")
    for label, key, fmt in ROWS:
        print(f"  {label:<{width}}  {fmt.format(report[key])}")
    sizes = P.sizes
    print(f"  {'block rows (vertices)':<{width}}  {int(sizes.min()):,} .. {int(sizes.max()):,}"
          f" (largest {1 + m.rows_imbalance:.2f}x the average)")
    if args.row_weight:
        print(f"  {'balanced load imbalance':<{width}}  {m.weighted_imbalance(args.row_weight):.1%}"
              f" (non-zeros + {args.row_weight} x rows per part)")
    print(f"wrote {args.output}", flush=True)
    if args.json:
        write_text_atomic(args.json, json.dumps(report, indent=2), "--json output")
    return report


def run(args) -> int:
    check_on_root(MPI.COMM_WORLD, 0, lambda: _partition(args))
    return 0
