"""spmmgnn train: full-batch GCN / GraphSAGE training over MPI.

    mpiexec -n 2 spmmgnn train                       # synthetic CSBM graph, 100 epochs
    mpiexec -n 4 spmmgnn train --dataset g.h5 --algorithm sparse15d --replication 2
"""

from __future__ import annotations

import json
from pathlib import Path

from mpi4py import MPI

from ..algorithms import ALGORITHMS
from ..atomic import check_writable, write_text_atomic
from ..codecs import CODECS
from ..data.csbm import DEFAULTS
from ..errors import agree, check_on_root, collective_error
from ..grid import ProcessGrid
from ..threads import default_threads, set_threads
from . import HelpFormatter

H5_SUFFIXES = {".h5", ".hdf5"}
# spmmgnn.nn.models.MODELS, spelled out so that building the parser (and --help) does not
# import torch; tests/test_startup.py checks the two agree
MODELS = ("gcn", "sage")


def add_parser(sub) -> None:
    p = sub.add_parser("train", help="full-batch GCN / GraphSAGE training over MPI",
                       description=__doc__.splitlines()[0],
                       formatter_class=HelpFormatter)
    d = p.add_argument_group("data")
    d.add_argument("--dataset", default="csbm",
                   help="'csbm' (synthetic, default), a project HDF5 file (each rank reads its "
                        "own block row), an OGB-style folder, a PyG .pt file (torch.save of a "
                        "Data or of its to_dict()), or any graph file spmmgnn loads (.mtx, .graph, "
                        "edge list, .npz; every format: (u, v) = edge u -> v, aggregated at "
                        "v)")
    d.add_argument("--csbm-n", type=int, default=DEFAULTS["n"], help="CSBM vertices")
    d.add_argument("--csbm-degree", type=float, default=DEFAULTS["avg_degree"],
                   help="CSBM average degree")
    d.add_argument("--csbm-features", type=int, default=DEFAULTS["num_features"],
                   help="CSBM feature dimensions")
    d.add_argument("--csbm-classes", type=int, default=DEFAULTS["num_classes"],
                   help="CSBM classes")
    d.add_argument("--csbm-homophily", type=float, default=DEFAULTS["homophily"],
                   help="probability that an edge is drawn inside its class (lower is harder)")
    d.add_argument("--csbm-signal", type=float, default=DEFAULTS["signal"],
                   help="length of the class feature means in noise units (lower is harder)")
    d.add_argument("--symmetrize", action="store_true",
                   help="use A + A^T (in-memory graphs; e.g. directed OGB citation graphs)")
    m = p.add_argument_group("model")
    m.add_argument("--model", choices=MODELS, default="gcn",
                   help="GCN (Kipf & Welling) or GraphSAGE with mean aggregation")
    m.add_argument("--layers", type=int, default=2, help="graph convolution layers")
    m.add_argument("--hidden", type=int, default=64, help="hidden size")
    m.add_argument("--dropout", type=float, default=0.5, help="dropout between layers")
    m.add_argument("--input-dropout", type=float, default=0.0,
                   help="dropout of the input features")
    m.add_argument("--layernorm", action="store_true", help="LayerNorm after hidden layers")
    m.add_argument("--no-cache", action="store_true",
                   help="recompute the first layer's constant aggregation every epoch")
    o = p.add_argument_group("optimization")
    o.add_argument("--epochs", type=int, default=100, help="epochs (full-batch steps)")
    o.add_argument("--lr", type=float, default=0.01, help="Adam learning rate")
    o.add_argument("--weight-decay", type=float, default=5e-4, help="Adam L2 weight decay")
    o.add_argument("--seed", type=int, default=0,
                   help="weights, dropout masks, synthetic graph and split")
    o.add_argument("--dtype", choices=["float32", "float64"], default="float32",
                   help="precision of features, weights and SpMM")
    o.add_argument("--eval-every", type=int, default=1,
                   help="evaluate accuracy every N epochs (0 = only report the loss)")
    r = p.add_argument_group("distribution")
    r.add_argument("--algorithm", choices=sorted(ALGORITHMS), default="sparse1d",
                   help="distributed SpMM algorithm")
    r.add_argument("--replication", type=int, default=1, help="c of the P/c x c grid")
    r.add_argument("--partitioner", default="none",
                   help="'none' (contiguous near-equal blocks) or a spmmgnn.partitioners method, "
                        "e.g. metis-vol+maxsend")
    r.add_argument("--threads", type=int, default=0, help="threads per rank (0 = cores/ranks)")
    r.add_argument("--codec", choices=["none", *CODECS], default="none",
                   help="compression of the row exchange (sparse algorithms)")
    r.add_argument("--codec-backward", choices=["same", "none", *CODECS], default="same",
                   help="compression of the backward exchange (default: as --codec)")
    m.add_argument("--label-propagation", type=float, default=0.0, metavar="RATE",
                   help="fraction of training vertices whose label embedding is added to "
                        "their input (they are left out of the loss)")
    r.add_argument("--reorder", choices=["none", "rcm"], default="none",
                   help="renumber the vertices inside each block row by reverse "
                        "Cuthill-McKee for cache locality of the local products (same blocks, "
                        "same bytes, same results up to rounding; not for HDF5 datasets)")
    r.add_argument("--staleness", type=int, default=0, metavar="R",
                   help="DistGNN cd-R (sparse1d only, Algorithm 4): the ghost rows are split "
                        "into R bins and each epoch sends one bin, which lands R epochs later "
                        "and is used until its next refresh (1/R of the bytes; no remote part "
                        "until a bin first lands). CHANGES THE MODEL'S MATHEMATICS; 0 "
                        "(default) is exact")
    r.add_argument("--delayed-backward", choices=["local", "delayed"], default="local",
                   help="with --staleness: the gradient through the stale remote part is "
                        "zero ('local', no backward exchange; default, see "
                        "bench/results/delayed.md) or the binned partial sums reduced R "
                        "epochs late ('delayed')")
    r.add_argument("--drop-remote", action="store_true",
                   help="DistGNN 0c (sparse1d only): ignore remote contributions, no exchange "
                        "at all. CHANGES THE MODEL'S MATHEMATICS (each rank trains on its own "
                        "block of the graph); evaluation still uses the exact operator")
    io = p.add_argument_group("output")
    io.add_argument("--json", help="write per-epoch loss/accuracy and time breakdown here")
    io.add_argument("--checkpoint", help="checkpoint file (.npz, written atomically)")
    io.add_argument("--checkpoint-every", type=int, default=0, help="epochs between checkpoints")
    io.add_argument("--resume", action="store_true", help="continue from --checkpoint")
    io.add_argument("--quiet", action="store_true", help="no progress line")
    p.set_defaults(func=run)


def _config(args):
    from ..training import TrainConfig

    return TrainConfig(
        model=args.model, layers=args.layers, hidden=args.hidden, dropout=args.dropout,
        input_dropout=args.input_dropout, layernorm=args.layernorm, lr=args.lr,
        weight_decay=args.weight_decay, epochs=args.epochs, seed=args.seed,
        eval_every=args.eval_every, checkpoint=args.checkpoint,
        checkpoint_every=args.checkpoint_every, resume=args.resume,
        cache_input_aggregation=not args.no_cache, progress=not args.quiet, dtype=args.dtype,
        label_propagation=args.label_propagation, staleness=args.staleness,
        drop_remote=args.drop_remote, delayed_backward=args.delayed_backward)


def op_options(args) -> dict:
    """DistSpMM options from the flags (codecs only when asked for, so every algorithm works
    without them)."""
    options = {} if args.reorder == "none" else dict(reorder=args.reorder)
    if args.codec == "none" and args.codec_backward in ("same", "none"):
        return options
    return dict(options, codec=args.codec, codec_backward=args.codec_backward,
                codec_seed=args.seed)


def load_data(args, grid: ProcessGrid, normalization: str):
    """The LocalData of this rank for ``args.dataset`` (collective)."""
    from ..training import distribute_graph, load_h5_distributed
    from ..training.trainer import DTYPES

    dtype = DTYPES[args.dtype]
    ds = args.dataset
    if ds != "csbm" and Path(ds).suffix.lower() in H5_SUFFIXES:
        from ..partitioners.api import CONTIGUOUS

        agree(grid.comm, "an HDF5 file is already partitioned when written (spmmgnn datasets "
              "... --parts K --partitioner M); drop --partitioner"
              if args.partitioner not in CONTIGUOUS else
              "--reorder renumbers block rows while one rank distributes the graph; an HDF5 "
              "file is read block by block: drop --reorder" if args.reorder != "none" else None)
        return load_h5_distributed(ds, grid, normalization, args.algorithm, seed=args.seed,
                                   dtype=dtype, **op_options(args))

    def make():
        if ds == "csbm":
            from ..data.csbm import csbm

            return csbm(n=args.csbm_n, avg_degree=args.csbm_degree,
                        num_features=args.csbm_features, num_classes=args.csbm_classes,
                        homophily=args.csbm_homophily, signal=args.csbm_signal, seed=args.seed)
        from ..data.loaders import load_graph

        return load_graph(ds)

    graph = check_on_root(grid.comm, 0, make)
    return distribute_graph(graph, grid, normalization, args.algorithm, args.partitioner,
                            seed=args.seed, dtype=dtype, symmetrize=args.symmetrize,
                            **op_options(args))


def run(args, on_epoch_end=None) -> int:
    import torch

    from ..nn.layers import NORMALIZATION
    from ..training import Trainer

    comm = MPI.COMM_WORLD
    threads = set_threads(args.threads or default_threads(comm))
    torch.set_num_threads(threads)
    config = _config(args)
    agree(comm, config.problem() or (None if config.epochs >= 1 else
                                     f"--epochs must be >= 1, got {config.epochs}"))
    outputs = [(args.json, "--json output"), (args.checkpoint, "checkpoint")]
    check_on_root(comm, 0, lambda: [check_writable(p, what) for p, what in outputs if p])
    grid = ProcessGrid(comm, args.replication)
    data = load_data(args, grid, NORMALIZATION[args.model])
    rank0 = comm.rank == 0
    if rank0 and not args.quiet:
        print(header(args, data, grid, threads), flush=True)
    trainer = Trainer(data, config)
    if trainer.start_epoch > config.epochs:  # the same on every rank: no agreement needed
        held = trainer.start_epoch - 1
        raise collective_error(f"the checkpoint {args.checkpoint} already holds {held} epochs; "
                               f"continue it with --epochs larger than {held}")
    result = trainer.fit(on_epoch_end=on_epoch_end)
    if rank0:
        result["threads_per_rank"] = threads
        fin, best = result["final"], result["best"]
        line = done_line(result)
        if "test_acc" in fin:
            line += (f"\nfinal epoch {fin['epoch']}: loss {fin['loss']:.4f}  train "
                     f"{fin['train_acc']:.4f}  val {fin['val_acc']:.4f}  test "
                     f"{fin['test_acc']:.4f}")
        if best:
            line += (f"\nbest-validation epoch {best['epoch']}: val {best['val_acc']:.4f}  "
                     f"test {best['test_acc']:.4f}")
        print(line, flush=True)
        if args.json:
            write_text_atomic(args.json, json.dumps(result, indent=1))
    return 0


def header(args, data, grid: ProcessGrid, threads: int) -> str:
    """The run's first line: the data, the model and everything that decides the bytes."""
    codec = args.codec if args.codec_backward == "same" else \
        f"{args.codec} (backward {args.codec_backward})"
    exact = ("0c (remote dropped)" if args.drop_remote else
             f"cd-{args.staleness} ({args.delayed_backward} backward)" if args.staleness else
             "exact")
    return (f"spmmgnn train: {data.name}: n={data.n} nnz={data.nnz} f={data.num_features} "
            f"classes={data.num_classes} | {args.model} {args.layers}x{args.hidden} "
            f"{args.dtype} | {args.algorithm} P={grid.size} c={grid.replication} "
            f"partitioner={args.partitioner} codec={codec} {exact} | threads/rank={threads}")


def done_line(result: dict) -> str:
    """Where the wall time went: the first epoch (JIT compilation or cache load) apart, then
    the steady epoch as training step (rank 0's breakdown) + evaluation + the rest."""
    n, wall = result["epochs_run"], result["wall_seconds"]
    text = f"done: {n} epochs in {wall:.2f} s wall"
    if n < 2:
        return text
    steady, step, ev = (result[k] * 1e3 for k in ("steady_epoch_wall_seconds",
                                                   "epoch_seconds", "eval_seconds"))
    parts = ", ".join(f"{k} {v * 1e3:.1f}" for k, v in result["breakdown"].items())
    first = result["first_epoch_seconds"]
    return (f"{text}: the first epoch {first:.2f} s (kernel set-up: compile or load, time "
            f"the variants), then {steady:.1f} ms/epoch = training step {step:.1f} ({parts}) "
            f"+ evaluation {ev:.1f} + checkpoints and the rest "
            f"{max(0.0, steady - step - ev):.1f} ms; peak resident memory "
            f"{result['peak_rss_bytes'] / 2**20:.0f} MiB on the largest rank")
