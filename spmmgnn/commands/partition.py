"""``spmmgnn partition``: the offline partition step.

Reads any supported graph file, partitions its rows into K block rows, writes the relabelled
graph with the block offsets in the project's HDF5 format (what ``spmmgnn train`` reads block
by block), prints the metrics table and writes it as JSON with ``--json``. For 1.5D training
on P ranks with replication c, partition into K = P/c parts.
"""

from __future__ import annotations

import json

from ..atomic import write_text_atomic
from ..errors import SpmmgnnError


def add_parser(sub) -> None:
    from ..partitioners.api import DEFAULT_METHOD, METHODS

    p = sub.add_parser("partition", help="partition a graph and write it as HDF5 block rows",
                       description=__doc__.splitlines()[0])
    p.add_argument("graph", help="graph file (.mtx, .graph, edge list, .npz, .h5) or OGB folder")
    p.add_argument("-k", "--parts", type=int, required=True, help="block rows (P/c)")
    p.add_argument("--method", default=DEFAULT_METHOD,
                   help=f"one of {', '.join(METHODS)} (default {DEFAULT_METHOD})")
    p.add_argument("--epsilon", type=float, default=0.03, help="allowed load imbalance")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="Mt-KaHyPar threads")
    p.add_argument("-o", "--out", required=True, help="output HDF5 file (written atomically)")
    p.add_argument("--json", help="write the metrics as JSON here")
    p.set_defaults(func=run)


def run(args) -> int:
    from mpi4py import MPI

    from ..data.h5graph import write_graph
    from ..data.loaders import load_graph
    from ..partitioners import partition

    if MPI.COMM_WORLD.Get_size() > 1:
        raise SpmmgnnError("spmmgnn partition is an offline step: run it without mpiexec")
    g = load_graph(args.graph)
    part = partition(g.adj, args.parts, method=args.method, epsilon=args.epsilon,
                     seed=args.seed, threads=args.threads)
    pg = g.permuted(part.perm)
    write_graph(args.out, pg.adj, offsets=part.offsets, perm=part.perm, features=pg.features,
                labels=pg.labels, masks=pg.masks or None,
                num_classes=g.num_classes or None, directed=g.directed)
    m = part.metrics.as_dict()
    m.update(method=part.method, seconds=part.seconds, n=g.n, nnz=int(g.adj.nnz))
    print(f"{g.name}: n={g.n} nnz={g.adj.nnz} -> {args.out} ({part.method}, "
          f"{part.seconds:.2f} s)")
    for key in ("k", "total_volume", "max_send", "send_imbalance", "max_recv",
                "recv_imbalance", "max_nnz", "load_imbalance"):
        v = m[key]
        print(f"  {key:>15}: {v:.4f}" if isinstance(v, float) else f"  {key:>15}: {v}")
    if args.json:
        write_text_atomic(args.json, json.dumps(m | {"per_part": part.metrics.as_dict(True)},
                                                indent=2))
    return 0
