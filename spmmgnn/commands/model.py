"""spmmgnn model: predicted SpMM / epoch times, or memory per rank, at P ranks without
launching them.

    spmmgnn model rmat:scale=17,edge_factor=8 --P 4 16 64 256 1024 --alpha 2e-6 --beta 4e-11
    spmmgnn model graph.mtx --P 64 256 --network results.jsonl -o model.png
    spmmgnn model csbm:n=100000 --memory --P 2 4 8 64 -f 128 --hidden 64 --classes 8
    spmmgnn model rmat:scale=16 --P 64 1024 --preset ib-hdr --ranks-per-node 4 32
    spmmgnn model csbm:n=1000000 --P 4 16 64 --preset ib-hdr --device-link pcie5 -f 128
    spmmgnn model csbm:n=1000000 --memory --P 1 2 4 -f 128 --device-memory 80

Per-rank bytes are exact (computed from the partition, as ``comm_stats()`` would count them);
times use the alpha-beta costs of ICPP'24 section 4 and the local kernel rate measured here.
oblivious2d/3d and plexus3d are also priced in their kept layouts (``train --grid-layout`` /
``--plexus-blocks``: a training step without conversions but the logits', next to the same
SpMMs in the row layout), and ``--memory`` gives them ``<name> kept`` rows.
``--ranks-per-node K`` prices two tiers (inside a node, between nodes:
``spmmgnn.exchange.tiers``) and the sparse algorithms with the flat and the node-aware exchange,
and says which ``--exchange auto`` would pick. ``--device-link NAME`` also projects one GPU per
rank behind that host <-> device link (``spmmgnn.exchange.tiers.DEVICE_LINKS``): the 1D and 1.5D
families (``device_volumes.device_leg_modelled``; the others are not projected), at the device's
local rate, each call adding the bytes its ``device_host`` tier counts over MPI. ``--memory
--device-memory GiB`` says, per rank, whether the operator's blocks and exchange buffers fit a
device of that size. ``--memory`` prints the bytes the largest rank holds while training a GCN,
by component (block-row CSR, halo index lists, exchange buffers, its rows of the data,
activations and gradients, weights, Adam's moments): ``spmmgnn.benchmark.memory``.
"""

from __future__ import annotations

import argparse
import json
import sys

from mpi4py import MPI

from ..exchange.tiers import DEVICE_LINKS, DEVICE_RATE
from ..runtime.errors import SpmmgnnError, check_on_root
from . import PARTS_PER_NODE_HELP, count_arg, file_roles, grid_arg
from ._model_args import (  # noqa: F401 (the names callers import from here)
    DEFAULT_C,
    LIMITS,
    MAX_P,
    NETWORK_NAMES,
    _algorithms,
    _alpha_beta,
    _check_args,
    _check_parts_per_node,
    _intra,
    _positive,
    _two_level_misfits,
)


def add_parser(sub) -> None:
    p = sub.add_parser("model", help="alpha-beta scaling model with exact per-rank volumes",
                       description=__doc__.split("\n\n")[0].replace("\n", " "),
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("graph", help="a graph spec (rmat:scale=..., random:..., csbm:...) or file")
    p.add_argument("--P", dest="P", nargs="+", type=int, default=[4, 16, 64, 256, 1024])
    p.add_argument("--c", dest="c", nargs="+", type=int, default=None,
                   help="replication factors to model (1D and 1.5D algorithms; default: "
                   f"{' '.join(map(str, DEFAULT_C))}, those that fit a twolevel: "
                   "partitioner's nodes)")
    p.add_argument("--grid", dest="grids", nargs="+", type=grid_arg, metavar="PRxPC[xPL]",
                   help="2D/3D grid shapes to model (those whose product is a --P; default: "
                        "at each P the factors closest to a square or cube)")
    p.add_argument("--algorithm", dest="algorithms", nargs="+",
                   help="default: every algorithm with a volume model")
    p.add_argument("--alpha", type=float, help="latency in seconds per message")
    p.add_argument("--beta", type=float, help="seconds per byte (1 / bandwidth)")
    p.add_argument("--network", help="take alpha and beta from the last 'spmmgnn bench "
                                     "--network' record of this results file")
    p.add_argument("--preset", choices=sorted(NETWORK_NAMES),
                   help="take alpha and beta from a named interconnect (nominal figures: "
                        "docs/scaling.md)")
    p.add_argument("--ranks-per-node", type=count_arg(1), nargs="+", metavar="K",
                   help="two tiers: consecutive ranks K at a time share a node; the sparse "
                        "algorithms are priced with the flat and the node-aware exchange "
                        "(several K: one table each)")
    p.add_argument("--alpha-intra", type=float,
                   help="with --ranks-per-node: latency inside a node (default: the "
                        "preset's, else the nominal shared-memory figure, docs/scaling.md)")
    p.add_argument("--beta-intra", type=float,
                   help="with --ranks-per-node: seconds per byte inside a node")
    p.add_argument("--exchange", nargs="+", choices=["flat", "node"],
                   help="with --ranks-per-node: the exchanges to price (default: both)")
    p.add_argument("--rate", type=float,
                   help="local kernel rate in non-zeros x columns per second (default: "
                        "from the --compare runs of this graph and width at one thread per "
                        "rank, else measured here with this process's threads)")
    p.add_argument("-f", "--features", type=int,
                   help="dense columns (default 64; with --memory the graph's feature width "
                        "when it has features)")
    p.add_argument("--layers", type=int, default=2, help="GCN layers (an epoch is 2L SpMMs)")
    p.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    p.add_argument("--partitioner", default="none",
                   help="'none' (contiguous blocks) or a spmmgnn.partitioners method")
    p.add_argument("--parts-per-node", type=count_arg(1), metavar="K",
                   help=PARTS_PER_NODE_HELP + ", a divisor of every P/c modelled (default "
                   "with --ranks-per-node and without --memory: the ranks per node / c)")
    p.add_argument("--staleness", type=int, default=0, metavar="R",
                   help="also model DistGNN cd-R on sparse1d (train --staleness R): each "
                        "epoch sends one of R bins of the ghost rows")
    p.add_argument("--delayed-backward", choices=["local", "delayed"], default="local",
                   help="with --staleness: the backward of train --delayed-backward")
    p.add_argument("--compare", help="a bench results file: print measured vs predicted for "
                                     "its bare-SpMM runs of this graph")
    p.add_argument("-o", "--plot", help="PNG of predicted epoch time vs P")
    p.add_argument("--json", help="write the predictions here")
    p.add_argument("--memory", action="store_true",
                   help="predict bytes per rank while training (no --alpha / --beta needed)")
    p.add_argument("--hidden", type=int, default=64, help="with --memory: hidden width")
    p.add_argument("--classes", type=int, help="with --memory: output width (default: the "
                                                "graph's number of classes, else 8)")
    p.add_argument("--codec", help="with --memory: the exchange's codec (sparse algorithms)")
    p.add_argument("--device-link", choices=sorted(DEVICE_LINKS),
                   help="also project one GPU per rank behind this host <-> device link "
                        "(nominal figures with their sources: docs/gpu.md)")
    p.add_argument("--device-rate", type=float,
                   help="with --device-link: the device's local product in non-zeros x "
                        f"columns per second (default {DEVICE_RATE[0]:.2g}: "
                        f"{DEVICE_RATE[1]})")
    p.add_argument("--device-memory", type=float, metavar="GiB",
                   help="with --memory: the memory of one rank's GPU; says per rank whether "
                        "the operator's blocks and exchange buffers fit it")
    p.set_defaults(func=run)
    file_roles(p, inputs={"graph": "graph", "compare": "--compare"},
               outputs={"plot": "-o", "json": "--json"})



def _memory(args) -> dict:
    """``--memory``: the memory model's table for every (P, c, algorithm)."""
    import numpy as np

    from ..benchmark.graphs import make_graph
    from ..benchmark.memory import ModelShape, format_memory, memory_rows
    from ..data.normalize import normalize
    from ..local.codecs import get_codec

    _check_args(args)
    timing = [f"--{name.replace('_', '-')}" for name in ("alpha", "beta", "network", "preset",
                                                        "rate", "compare", "plot",
                                                        "device_link", "device_rate")
              if getattr(args, name)] + (["--staleness"] if args.staleness else [])
    if timing:
        raise SpmmgnnError(f"--memory predicts bytes, not time: {', '.join(timing)} do(es) "
                           "not apply")
    algorithms = _algorithms(args)
    _check_parts_per_node(args, algorithms)
    get_codec(args.codec)  # an unknown name is an error before the graph is built
    print(f"spmmgnn model: building {args.graph} and its partitions (a large graph takes a "
          "while; each P's rows print as they are ready)", file=sys.stderr, flush=True)
    g = make_graph(args.graph)
    classes = args.classes or g.num_classes or 8
    if args.features is None:
        args.features = g.features.shape[1] if g.features is not None else 64
    shape = ModelShape(features=args.features, hidden=args.hidden, classes=classes,
                       layers=args.layers, itemsize=np.dtype(args.dtype).itemsize)
    A = normalize(g.adj, "gcn")
    print(f"graph {args.graph}: n={A.shape[0]} nnz={A.nnz} (GCN-normalized, self loops); "
          f"GCN {' -> '.join(map(str, shape.widths))}, {args.dtype}, codec "
          f"{args.codec or 'none'}, partitioner {args.partitioner}; MiB on the largest rank "
          "(the interpreter and libraries not counted)", flush=True)
    rows, layouts = [], {}
    for i, P in enumerate(args.P):  # each P's rows as they are ready: a big graph takes time
        done = memory_rows(A, [P], args.c, algorithms, shape, args.partitioner, args.codec,
                           layouts=layouts, grids=args.grids,
                           parts_per_node=args.parts_per_node)
        print(format_memory(done, header=i == 0), flush=True)
        rows += done
    out = dict(graph=args.graph, n=int(A.shape[0]), nnz=int(A.nnz), widths=shape.widths,
               dtype=args.dtype, codec=args.codec, partitioner=args.partitioner,
               memory=rows)
    if args.device_memory:
        out["device_memory_gib"] = args.device_memory
        out["device"] = _device_memory(A, args, algorithms, shape, layouts)
    if args.json:
        from ..runtime.atomic import write_text_atomic

        write_text_atomic(args.json, json.dumps(out, indent=1), "--json output")
    return out


def _device_memory(A, args, algorithms: list[str], shape, layouts: dict) -> list[dict]:
    """``--device-memory``: per (P, c, algorithm) projected onto GPUs (the 1D and 1.5D
    families), what its largest rank keeps on its GPU and whether every rank fits."""
    from ..benchmark.device_memory import GIB, device_rows, format_device

    print(f"\non a GPU of {args.device_memory:g} GiB per rank (ProcessGrid(device=...)): the "
          "operator's torch CSR blocks, one call's exchange tensors at the widest width, the "
          "training's dense part; MiB on the largest rank (CUDA's context not counted)",
          flush=True)
    rows: list[dict] = []
    for P in args.P:  # each P's rows as they are ready, as the memory table's: no silent wait
        done = device_rows(A, [P], args.c, algorithms, shape, args.device_memory * GIB,
                           args.partitioner, layouts, args.parts_per_node)
        if done:
            print(format_device(done, header=not rows), flush=True)
        rows += done
    if not rows:
        print("no algorithm of --algorithm is projected onto GPUs (1D/1.5D only)", flush=True)
    return rows


def _work(args) -> dict:
    import numpy as np

    from ..benchmark import costs
    from ..benchmark.compare import compare_runs, format_compare, measured_rate, spmm_records
    from ..benchmark.graphs import make_graph

    args.c_given = args.c is not None
    args.c = list(args.c or DEFAULT_C)
    if args.memory:
        return _memory(args)
    if args.codec or args.classes or args.hidden != 64:
        raise SpmmgnnError("--codec, --classes and --hidden describe the trained model of "
                           "--memory; the time model prices bare SpMMs of -f columns")
    args.features = args.features or 64
    _check_args(args)
    alpha, beta, source = _alpha_beta(args)
    algorithms = _algorithms(args)
    _check_parts_per_node(args, algorithms)
    A = make_graph(args.graph).adj
    itemsize = np.dtype(args.dtype).itemsize
    records = spmm_records(args.compare, args.graph) if args.compare else []
    rate = args.rate or measured_rate(records, args.features) or costs.measure_rate(
        A, args.features, args.dtype)
    m = costs.Machine(alpha=alpha, beta=beta, rate=rate)
    print(f"graph {args.graph}: n={A.shape[0]} nnz={A.nnz}; alpha={alpha:.3g} s, "
          f"beta={beta:.3g} s/B ({source}); local rate {rate / 1e9:.3f} G nnz*col/s; "
          f"f={args.features}, epoch = {2 * args.layers} SpMMs", flush=True)
    layouts: dict = {}
    rows, notes, kept = [], [], []
    for K in args.ranks_per_node or [None]:
        if K is not None:
            a_in, b_in, nics, where = _intra(args)
            m = costs.Machine(alpha=alpha, beta=beta, rate=rate, ranks_per_node=K,
                              alpha_intra=a_in, beta_intra=b_in, nics=nics)
            print(f"\n{K} ranks per node: inside a node alpha={a_in:.3g} s, beta={b_in:.3g} "
                  f"s/B ({where}); between nodes the figures above, {nics} link(s) per node "
                  "shared by its ranks", flush=True)
        got = costs.predict_all(A, args.P, args.c, algorithms, args.features, itemsize, m,
                                2 * args.layers, args.partitioner, layouts=layouts,
                                grids=args.grids, exchanges=tuple(args.exchange),
                                parts_per_node=args.parts_per_node)
        for r in got:
            r["ranks_per_node"] = K
        mine = costs.crossovers(got) + costs.exchange_notes(got)
        if args.staleness:
            stale = costs.delayed_rows(A, args.P, args.staleness, args.features, itemsize, m,
                                       args.layers, args.delayed_backward, args.partitioner,
                                       layouts=layouts)
            mine += costs.delayed_notes(got, stale)
            got += stale
        _print_rows(got, two_tier=K is not None)
        print("\n".join(mine), flush=True)
        rows += got
        notes += mine
        kept += _kept(A, args, m, itemsize, layouts, K)
        if args.device_link:
            got, mine = _on_devices(A, args, m, itemsize, layouts, rows)
            rows += got
            notes += mine
    out = dict(graph=args.graph, n=int(A.shape[0]), nnz=int(A.nnz), alpha=alpha, beta=beta,
               alpha_beta_source=source, rate=rate, device_link=args.device_link,
               device_rate=(args.device_rate or DEVICE_RATE[0]) if args.device_link else None,
               f=args.features, layers=args.layers,
               partitioner=args.partitioner, predictions=rows, kept=kept, summary=notes)
    if args.compare:
        out["compare"] = compare_runs(A, records, args.partitioner, m,
                                      fixed_rate=args.rate is not None)
        print(format_compare(out["compare"]), flush=True)
    if args.plot:
        _plot(rows, args, args.plot)
    if args.json:
        from ..runtime.atomic import write_text_atomic

        write_text_atomic(args.json, json.dumps(out, indent=1), "--json output")
    return out


def _kept(A, args, m, itemsize: int, layouts: dict, K) -> list[dict]:
    """The training step in the kept layouts (``train --grid-layout`` / ``--plexus-blocks``)
    of the modelled oblivious2d/3d and plexus3d points, printed next to the same SpMMs in
    the row layout (``costs.kept_rows``); [] when none is modelled."""
    from ..benchmark import costs

    kept = costs.kept_rows(A, args.P, _algorithms(args), args.features, itemsize, m,
                           args.layers, args.partitioner, layouts=layouts, grids=args.grids,
                           parts_per_node=args.parts_per_node or K)
    if not kept:
        return []
    print(f"\nkept layouts (train --grid-layout: oblivious2d/3d; --plexus-blocks: plexus3d): "
          f"a training step of a {args.layers}-layer GCN {args.features} -> ... -> "
          f"{args.features} without the first-layer cache ({2 * args.layers - 1} SpMMs, "
          "the dense products' moves, conversions only of the logits; 'step ms'), and the "
          "same SpMMs in the row layout, each converting to and from the rows ('rows ms')",
          flush=True)
    print(f"{'P':>5} {'grid':>7} {'algorithm':>16} {'max MB sent':>12} {'convert MB':>11} "
          f"{'step ms':>9} {'rows ms':>9}", flush=True)
    for r in kept:
        r["ranks_per_node"] = K
        print(f"{r['P']:>5} {r['grid']:>7} {r['algorithm']:>16} "
              f"{r['max_bytes_sent'] / 1e6:>12.3f} {r['max_convert_bytes'] / 1e6:>11.3f} "
              f"{r['epoch_seconds'] * 1e3:>9.2f} {r['row_step_seconds'] * 1e3:>9.2f}",
              flush=True)
    return kept


def _on_devices(A, args, m, itemsize: int, layouts: dict, cpu: list[dict]):
    """``--device-link``: the rows of one GPU per rank (the families whose device leg is
    modelled, at the device's rate, the host <-> device leg added) and their notes, each P's
    best set against the best of the CPU rows ``cpu`` of the same ranks per node."""
    import dataclasses

    from ..benchmark import costs
    from ..exchange.tiers import device_link

    name = args.device_link
    link = device_link(name)
    rate = args.device_rate or DEVICE_RATE[0]
    dev = dataclasses.replace(m, rate=rate, link=link, link_name=name)
    got = costs.predict_all(A, args.P, args.c, _algorithms(args), args.features, itemsize,
                            dev, 2 * args.layers, args.partitioner, layouts=layouts,
                            grids=args.grids)
    K = m.ranks_per_node
    for r in got:
        r["ranks_per_node"] = K
    print(f"\none GPU per rank behind {name}: alpha={link.alpha:.3g} s, beta={link.beta:.3g} "
          f"s/B a copy ({link.source}); local rate {rate / 1e9:.1f} G nnz*col/s"
          f"{' (given)' if args.device_rate else ' (' + DEVICE_RATE[1] + ')'}; the network "
          "figures above between ranks", flush=True)
    if not got:
        print("no algorithm of --algorithm is projected onto GPUs (1D/1.5D only)", flush=True)
        return [], []
    mine = [f"GPUs ({name}): {note}" for note in costs.crossovers(got)]
    for P in sorted({r["P"] for r in got}):
        gpu = min((r for r in got if r["P"] == P), key=lambda r: r["seconds"])
        host = [r for r in cpu if r["P"] == P and r.get("ranks_per_node") == K
                and "device_link" not in r]
        if host:
            best = min(host, key=lambda r: r["seconds"])
            mine.append(f"P={P}: GPUs ({name}) {gpu['algorithm']} "
                        f"{best['seconds'] / max(gpu['seconds'], 1e-30):.2f}x the speed of the "
                        f"best CPU layout ({best['algorithm']}); the host <-> device leg is "
                        f"{gpu['device_host'] / max(gpu['seconds'], 1e-30):.0%} of its SpMM")
    _print_rows(got, two_tier=K is not None)
    print("\n".join(mine), flush=True)
    return got, mine


def _print_rows(rows: list[dict], two_tier: bool) -> None:
    """The prediction table (with the exchange and the inter-node bytes on two tiers)."""
    extra = f" {'exch':>5} {'inter MB':>9}" if two_tier else ""
    device = any("device_link" in r for r in rows)
    extra += f" {'host MB':>9} {'host ms':>9}" if device else ""
    print(f"{'P':>5} {'grid':>7} {'algorithm':>13}{extra} {'max MB sent':>12} {'avg MB':>9} "
          f"{'local ms':>9} {'exch ms':>9} {'allred ms':>9} {'SpMM ms':>9} {'epoch ms':>9}")
    for r in rows:
        extra = (f" {r.get('exchange_kind') or '-':>5} {r.get('inter_bytes_sent', 0) / 1e6:>9.3f}"
                 if two_tier else "")
        if device:
            extra += (f" {r.get('max_device_host_bytes', 0) / 1e6:>9.3f}"
                      f" {r.get('device_host', 0) * 1e3:>9.3f}")
        print(f"{r['P']:>5} {r.get('grid') or 'c=' + str(r['c']):>7} {r['algorithm']:>13}"
              f"{extra} {r['max_bytes_sent'] / 1e6:>12.3f}"
              f" {r['avg_bytes_sent'] / 1e6:>9.3f} {r['local'] * 1e3:>9.3f} "
              f"{r['exchange'] * 1e3:>9.3f} {r['allreduce'] * 1e3:>9.3f} "
              f"{r['seconds'] * 1e3:>9.3f} {r['epoch_seconds'] * 1e3:>9.2f}")


def _plot(rows: list[dict], args, path: str) -> None:
    from ..benchmark.plots import plot_model

    plot_model(rows, args.graph, args.features, args.layers, path)


def run(args) -> int:
    check_on_root(MPI.COMM_WORLD, 0, lambda: _work(args))
    return 0
