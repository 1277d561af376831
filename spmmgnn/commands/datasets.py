"""``spmmgnn datasets``: write graphs in the project's HDF5 format (partitioned, ready to train).

    spmmgnn datasets wordnet --out wordnet.h5 --parts 2   # WordNet 3.0 from wordnet-base
    spmmgnn datasets csbm --out csbm.h5 --n 100000        # synthetic CSBM
    spmmgnn datasets convert ogbn-arxiv/ --out arxiv.h5 --symmetrize
    spmmgnn datasets info wordnet.h5

The file is written once, after partitioning: vertices relabelled so each of the ``--parts``
block rows is contiguous, block offsets and the permutation stored; ``spmmgnn train
--dataset FILE`` on P/c = parts block rows then reads only its own block row per rank.
Runs on rank 0 (other ranks of an mpiexec launch just wait).
"""

from __future__ import annotations

import sys
import time

import numpy as np
from mpi4py import MPI

from ..data.csbm import DEFAULTS, MAX_SIGNAL
from ..runtime.atomic import check_writable
from ..runtime.errors import check_on_root
from . import (
    PARTS_PER_NODE_HELP,
    ROW_WEIGHT_HELP,
    HelpFormatter,
    check_parts_per_node,
    count_arg,
    file_roles,
    real_arg,
)


def add_parser(sub) -> None:
    p = sub.add_parser("datasets", help="write graphs as partitioned HDF5 files",
                       description=__doc__.splitlines()[0])
    s = p.add_subparsers(dest="dataset_command", required=True, metavar="DATASET")

    def common(q, out_required=True):
        q.add_argument("--out", required=out_required, help="HDF5 file to write")
        q.add_argument("--parts", type=int, default=1,
                       help="block rows to lay out (= P/c of the training run)")
        q.add_argument("--partitioner", default="none",
                       help="'none' (contiguous near-equal blocks) or a spmmgnn.partitioners "
                            "method, e.g. metis-vol+maxsend")
        q.add_argument("--parts-per-node", type=count_arg(1), metavar="K",
                       help=PARTS_PER_NODE_HELP + ", a divisor of --parts")
        q.add_argument("--row-weight", type=count_arg(0), default=0, metavar="W",
                       help=ROW_WEIGHT_HELP)
        q.add_argument("--seed", type=int, default=0, help="seed of the graph and partitioner")
        file_roles(q, inputs={"input": "input"}, outputs={"out": "--out"})

    w = s.add_parser("wordnet", help="WordNet 3.0 synset graph (needs Debian's wordnet-base)")
    common(w)
    w.add_argument("--wordnet-dir", help="folder with data.noun etc. (default: search "
                                         "/usr/share/wordnet)")
    w.add_argument("--dim", type=int, default=128, help="feature dimensions (TF-IDF + SVD)")
    c = s.add_parser("csbm", help="synthetic contextual stochastic block model",
                     description="A synthetic contextual stochastic block model: classes of "
                                 "vertices, edges mostly inside a class, noisy class features.",
                     formatter_class=HelpFormatter)
    common(c)
    c.add_argument("--n", type=int, default=DEFAULTS["n"], help="vertices")
    c.add_argument("--degree", type=real_arg(0), default=DEFAULTS["avg_degree"],
                   help="average degree")
    c.add_argument("--features", type=int, default=DEFAULTS["num_features"],
                   help="feature dimensions")
    c.add_argument("--classes", type=int, default=DEFAULTS["num_classes"],
                   help="classes (at least 2)")
    c.add_argument("--homophily", type=real_arg(0, 1), default=DEFAULTS["homophily"],
                   help="probability that an edge is drawn inside its class (lower is harder)")
    c.add_argument("--signal", type=real_arg(0, MAX_SIGNAL), default=DEFAULTS["signal"],
                   help="length of the class feature means in noise units (lower is harder)")
    v = s.add_parser("convert", help="any graph spmmgnn loads (file or OGB folder) to HDF5")
    v.add_argument("input")
    common(v)
    v.add_argument("--symmetrize", action="store_true", help="write A + A^T")
    i = s.add_parser("info", help="describe an HDF5 graph file")
    i.add_argument("path")
    p.set_defaults(func=run)


def info(path) -> str:
    from ..data.h5graph import _open

    with _open(path) as h:
        a = dict(h.attrs)
        offsets = h["offsets"][...]
        lines = [f"{path}: n={a['n']} nnz={a['nnz']} block rows={a['k']} "
                 f"directed={bool(a['directed'])} classes={a.get('num_classes', '-')}",
                 f"  block sizes: {np.diff(offsets).tolist()}"]
        if "partition_method" in a:
            lines.append(f"  partition: {_text(a['partition_method'])} "
                         f"({float(a.get('partition_seconds', 0.0)):.1f} s)")
        if "features" in h:
            lines.append(f"  features: {h['features'].shape[1]} x float32")
        if "masks" in h:
            g = h["masks"]
            lines.append("  split: " + ", ".join(f"{k}={int(g[k][...].sum())}" for k in g))
    return "\n".join(lines)


def _text(value) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _build(args):
    if args.dataset_command == "wordnet":
        from ..data.wordnet import wordnet_graph

        print("spmmgnn datasets: reading WordNet and computing its TF-IDF + SVD features "
              "(about 15 s)", file=sys.stderr, flush=True)

        return wordnet_graph(args.wordnet_dir, dim=args.dim, seed=args.seed)
    if args.dataset_command == "csbm":
        from ..data.csbm import csbm

        return csbm(n=args.n, avg_degree=args.degree, num_features=args.features,
                    num_classes=args.classes, homophily=args.homophily, signal=args.signal,
                    seed=args.seed)
    from ..data.loaders import load_graph

    g = load_graph(args.input)
    if args.symmetrize:
        A = g.adj
        g.adj = ((A + A.T) > 0).astype(np.float64).tocsr()
        g.directed = False
    return g


def run(args) -> int:
    from ..data.partitioned import write_partitioned  # h5py: loaded when a command runs

    comm = MPI.COMM_WORLD

    def work():
        from ..partitioners.api import check_row_weight_use, stderr_progress

        if args.dataset_command == "info":
            return info(args.path)
        check_writable(args.out, "graph file")
        check_parts_per_node(args.partitioner, args.parts_per_node, {"--parts": args.parts},
                             "--partitioner")
        check_row_weight_use(args.row_weight, args.partitioner, "--partitioner")
        t0 = time.perf_counter()
        g = _build(args)
        t1 = time.perf_counter()
        extra = {} if args.parts_per_node is None else dict(parts_per_node=args.parts_per_node)
        if args.row_weight:
            extra["row_weight"] = args.row_weight
        part = write_partitioned(g, args.out, args.parts, args.partitioner, args.seed,
                                 progress=stderr_progress, **extra)
        return (f"wrote {args.out}: {g.name} n={g.n} nnz={int(g.adj.nnz)} "
                f"features={None if g.features is None else g.features.shape[1]} "
                f"classes={g.num_classes} block rows={part.k} "
                f"({part.method}) in {t1 - t0:.1f} s + {time.perf_counter() - t1:.1f} s")

    message = check_on_root(comm, 0, work)
    if comm.rank == 0:
        print(message, flush=True)
    return 0
