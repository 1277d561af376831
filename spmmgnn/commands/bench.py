"""spmmgnn bench: a sweep of algorithms, c, partitioners, codecs and widths, one JSON line per run.

    mpiexec -n 2 spmmgnn bench --preset quick -o results.jsonl
    mpiexec -n 4 spmmgnn bench --config sweep.toml -o results.jsonl   # restart: skips done runs
    mpiexec -n 2 spmmgnn bench --network -o results.jsonl             # alpha, beta of the machine

A restart skips every run whose newest record succeeded and runs the failed ones again (a
failure is often the machine's: memory, a killed rank); the new record is appended and the
report uses the newest record of each run.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

from mpi4py import MPI

from ..runtime.atomic import check_writable
from ..runtime.errors import SpmmgnnError, check_on_root
from ..runtime.wire import bcast_json
from . import EXCHANGE_HELP, RANKS_PER_NODE_HELP, count_arg, file_roles, grid_arg

PRESETS = {
    # every algorithm (the 2D/3D ones on the grid closest to a square / cube), c = 1, 2,
    # METIS, int2
    "quick": dict(graphs=["csbm:n=20000,avg_degree=16"], modes=["spmm", "train"],
                  algorithms=["oblivious1d", "sparse1d", "prepost1d", "featureparallel",
                              "oblivious15d", "sparse15d", "oblivious2d", "sparse2d",
                              "oblivious3d", "sparse3d", "plexus3d"],
                  replication=[1, 2], partitioners=["none", "metis-vol"],
                  codecs=["none", "int2"], features=[64], repeat=5, epochs=20),
}

def add_parser(sub) -> None:
    p = sub.add_parser("bench", help="benchmark sweep: one JSON line per run, restartable",
                       description=__doc__.splitlines()[0],
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="\n".join(__doc__.splitlines()[1:]))
    p.add_argument("-o", "--results", default="bench-results.jsonl",
                   help="results file (JSON lines, appended to, never overwritten)")
    p.add_argument("--config", help="TOML file with the sweep's keys (top level or [sweep])")
    p.add_argument("--preset", choices=sorted(PRESETS), help="a built-in sweep")
    p.add_argument("--network", action="store_true",
                   help="measure alpha and beta (ping-pong, all-to-all) instead of a sweep")
    s = p.add_argument_group("sweep (each overrides --config / --preset)")
    s.add_argument("--graph", dest="graphs", nargs="+",
                   help="rmat:scale=14,edge_factor=8 | random:n=..,avg_degree=.. | "
                        "sbm:n=..,communities=..,mixing=.. | csbm:n=..,avg_degree=.. | "
                        "a graph file")
    s.add_argument("--mode", dest="modes", nargs="+", choices=["spmm", "train"],
                   help="bare SpMMs and/or GCN training epochs")
    s.add_argument("--algorithm", dest="algorithms", nargs="+")
    s.add_argument("--replication", nargs="+", type=int, help="values of c")
    s.add_argument("--grid", dest="grids", nargs="+", type=grid_arg, metavar="PRxPC[xPL]",
                   help="2D/3D grid shapes of the 2D/3D algorithms (those whose product is P "
                        "run; default: the factors of P closest to a square or cube)")
    s.add_argument("--exchange", dest="exchanges", nargs="+", choices=["flat", "node", "auto"],
                   help=EXCHANGE_HELP + "; several: one run each")
    s.add_argument("--ranks-per-node", type=count_arg(1), metavar="K", help=RANKS_PER_NODE_HELP)
    s.add_argument("--partitioner", dest="partitioners", nargs="+",
                   help="'none' (contiguous blocks) or spmmgnn.partitioners methods")
    s.add_argument("--codec", dest="codecs", nargs="+", help="'none' or codec names")
    s.add_argument("-f", "--features", nargs="+", type=int,
                   help="feature widths (SpMM) / hidden sizes (training)")
    s.add_argument("--repeat", type=int, help="timed SpMMs per run")
    s.add_argument("--epochs", type=int, help="epochs per training run")
    s.add_argument("--layers", type=int, help="GCN layers (training)")
    s.add_argument("--no-cache", dest="cache", action="store_const", const=False,
                   help="recompute the first layer's aggregation every epoch (all runs)")
    s.add_argument("--dtype", choices=["float32", "float64"])
    s.add_argument("--seed", type=int)
    s.add_argument("--device", help="train mode on a torch device: cpu, cuda or cuda:k (as "
                   "spmmgnn train --device; default none: numpy/numba)")
    s.add_argument("--transport", choices=["mpi", "torch", "auto"],
                   help="how the rows travel (as spmmgnn train --transport; default auto)")
    s.add_argument("--grid-layout", action="store_const", const=True,
                   help="train mode, oblivious2d/oblivious3d: the activations stay in SUMMA's "
                        "blocks between layers (as spmmgnn train --grid-layout)")
    s.add_argument("--plexus-blocks", type=count_arg(1), metavar="K",
                   help="train mode, plexus3d: train in Plexus's blocks, the aggregation in K "
                        "row blocks (as spmmgnn train --plexus-blocks K)")
    p.add_argument("--threads", type=count_arg(0), default=0,
                   help="threads per rank (0 = cores/ranks)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run)
    file_roles(p, inputs={"config": "--config", "graphs": "--graph"},
               outputs={"results": "-o"})


def sweep_config(args):
    """Defaults, then the preset, then the TOML file, then explicit flags."""
    from ..benchmark.sweep import SweepConfig

    values: dict = {}
    if args.preset:
        values.update(PRESETS[args.preset])
    if args.config:
        values.update(SweepConfig.from_toml(args.config))
    for f in dataclasses.fields(SweepConfig):
        v = getattr(args, f.name, None)
        if v is not None:
            values[f.name] = v
    try:
        cfg = SweepConfig(**values)
    except TypeError as exc:
        raise SpmmgnnError(f"sweep: {exc}") from None
    return cfg.check()


def _network(comm, args) -> int:
    from .. import __version__
    from ..benchmark.harness import machine
    from ..benchmark.network import measure
    from ..benchmark.records import append_record

    rec = measure(comm)
    if comm.rank == 0:
        rec.update(run_id=f"network-{time.time():.0f}", version=__version__, machine=machine(),
                   time=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        append_record(args.results, rec)
        a2a = rec["all_to_all"]
        print(f"ping-pong:  alpha {rec['alpha'] * 1e6:.2f} us  beta {rec['beta'] * 1e9:.4f} "
              f"ns/B ({1e-9 / max(rec['beta'], 1e-30):.2f} GB/s)\n"
              f"all-to-all: alpha {a2a['alpha'] * 1e6:.2f} us  beta {a2a['beta'] * 1e9:.4f} "
              f"ns/B per pair  -> {args.results}", flush=True)
    return 0


def run(args) -> int:
    from ..benchmark.runs import run_sweep
    from ..runtime.threads import default_threads, set_threads

    comm = MPI.COMM_WORLD
    threads = set_threads(args.threads or default_threads(comm))
    check_on_root(comm, 0, lambda: check_writable(args.results, "results file"))
    if args.network:
        return _network(comm, args)
    cfg = check_on_root(comm, 0, lambda: sweep_config(args))
    fields = bcast_json(comm, dataclasses.asdict(cfg) if comm.rank == 0 else None)
    if comm.rank != 0:
        from ..benchmark.sweep import SweepConfig

        cfg = SweepConfig(**fields)
    ran, skipped, failed = run_sweep(comm, cfg, args.results, threads,
                                     progress=not args.quiet)
    if comm.rank == 0:
        print(f"spmmgnn bench: {ran} run(s) recorded ({failed} failed), {skipped} already "
              f"in {args.results}", flush=True)
    return 0
