"""spmmgnn train: full-batch GCN / GraphSAGE training over MPI.

    mpiexec -n 2 spmmgnn train                       # synthetic CSBM graph, 100 epochs
    mpiexec -n 4 spmmgnn train --dataset g.h5 --algorithm sparse15d --replication 2
"""

from __future__ import annotations

from mpi4py import MPI

from ..algorithms import ALGORITHMS
from ..data.csbm import DEFAULTS, MAX_SIGNAL
from ..local.codecs import CODECS
from . import (
    EXCHANGE_HELP,
    GRID_HELP,
    RANKS_PER_NODE_HELP,
    ROW_WEIGHT_HELP,
    HelpFormatter,
    count_arg,
    file_roles,
    grid_arg,
    real_arg,
)

# spmmgnn.nn.models.MODELS, spelled out so that building the parser (and --help) does not
# import torch; tests/project/test_startup.py checks the two agree
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
    d.add_argument("--csbm-degree", type=real_arg(0), default=DEFAULTS["avg_degree"],
                   help="CSBM average degree")
    d.add_argument("--csbm-features", type=int, default=DEFAULTS["num_features"],
                   help="CSBM feature dimensions")
    d.add_argument("--csbm-classes", type=int, default=DEFAULTS["num_classes"],
                   help="CSBM classes")
    d.add_argument("--csbm-homophily", type=real_arg(0, 1), default=DEFAULTS["homophily"],
                   help="probability that an edge is drawn inside its class (lower is harder)")
    d.add_argument("--csbm-signal", type=real_arg(0, MAX_SIGNAL), default=DEFAULTS["signal"],
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
    r.add_argument("--grid", type=grid_arg, metavar="PRxPC[xPL]", help=GRID_HELP)
    r.add_argument("--ranks-per-node", type=count_arg(1), metavar="K", help=RANKS_PER_NODE_HELP)
    r.add_argument("--exchange", choices=["flat", "node", "auto"], default=None,
                   help=EXCHANGE_HELP + "; default: 'node' where every rank shares one "
                        "node's memory and reads the rows in place (sparse1d, sparse15d and "
                        "prepost1d on the host, without a codec, delayed views or "
                        "--ranks-per-node), 'flat' otherwise")
    r.add_argument("--partitioner", default="none",
                   help="'none' (contiguous near-equal blocks) or a spmmgnn.partitioners method, "
                        "e.g. metis-vol+maxsend")
    r.add_argument("--row-weight", type=count_arg(0), default=0, metavar="W",
                   help=ROW_WEIGHT_HELP)
    r.add_argument("--threads", type=count_arg(0), default=0,
                   help="threads per rank (0 = cores/ranks)")
    r.add_argument("--device", default=None, metavar="{cpu,cuda,cuda:k}",
                   type=lambda v: None if v.lower() == "none" else v,
                   help="train on a torch device: the operator's blocks, features, parameters, "
                        "dropout, loss and Adam live there (cuda: GPU local rank mod device "
                        "count); default: numpy/numba on the CPU (docs/gpu.md)")
    r.add_argument("--transport", choices=["mpi", "torch", "auto"], default="auto",
                   help="how the rows and gradients travel: mpi, or torch (torch.distributed: "
                        "NCCL on CUDA, Gloo on the CPU); auto: NCCL on CUDA grids of more "
                        "than one rank, MPI otherwise (docs/gpu.md)")
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
    r.add_argument("--plexus-blocks", type=int, default=0, metavar="K",
                   help="with --algorithm plexus3d (GCN): train in Plexus's 3D blocks, every "
                        "product of the layer on the grid and no conversion between layers, "
                        "the aggregation in K row blocks each overlapped with its "
                        "reduce-scatter (same losses); 0 (default): the row layout")
    r.add_argument("--drop-remote", action="store_true",
                   help="DistGNN 0c (sparse1d only): ignore remote contributions, no exchange "
                        "at all. CHANGES THE MODEL'S MATHEMATICS (each rank trains on its own "
                        "block of the graph); evaluation still uses the exact operator")
    r.add_argument("--grid-layout", action="store_true",
                   help="oblivious2d/oblivious3d, GCN only: keep the activations in SUMMA's "
                        "2D/3D blocks between layers, as CAGNET trains (its bytes per epoch; "
                        "only the input features, once, and the logits are converted). Off by "
                        "default: its H W all-gathers move more than the row layout's "
                        "conversions once pc >= 3 (docs/algorithms/oblivious2d.md)")
    io = p.add_argument_group("output")
    io.add_argument("--json", help="write per-epoch loss/accuracy and time breakdown here")
    io.add_argument("--checkpoint", help="checkpoint file (.npz, written atomically)")
    io.add_argument("--checkpoint-every", type=int, default=0, help="epochs between checkpoints")
    io.add_argument("--resume", action="store_true", help="continue from --checkpoint")
    io.add_argument("--overwrite-checkpoint", action="store_true",
                    help="start over on a --checkpoint that holds another run (by default "
                         "refused: its options or data fingerprint differ)")
    io.add_argument("--quiet", action="store_true", help="no progress line")
    p.set_defaults(func=run)
    # --checkpoint with --resume is read and written: one argument, not compared with itself
    file_roles(p, inputs={"dataset": "--dataset"},
               outputs={"json": "--json", "checkpoint": "--checkpoint"})


def run(args, on_epoch_end=None) -> int:
    """``spmmgnn train``: the flags as a ``RunSpec``, run by ``training.run_training``."""
    from ..training.run import RunSpec, run_training

    run_training(RunSpec.from_args(args), MPI.COMM_WORLD, on_epoch_end=on_epoch_end)
    return 0
