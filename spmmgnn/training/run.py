"""A training run as a library call: ``run_training(RunSpec(...), comm) -> dict``.

``spmmgnn train`` builds a ``RunSpec`` from its flags (the attribute names are the flags'
dest names) and calls ``run_training``; ``spmmgnn bench`` builds one per sweep point and
calls the same function, so both run exactly the same code. Collective.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from mpi4py import MPI

from ..backend.device import describe
from ..data.csbm import DEFAULTS
from ..exchange.shared import shares_memory
from ..grid import ProcessGrid
from ..nn.grid_model import GRID_ALGORITHMS
from ..runtime.agreement import agree_on
from ..runtime.atomic import check_writable, default_mode, write_text_atomic
from ..runtime.errors import SpmmgnnError, agree, check_on_root, collective_error
from ..runtime.node_layout import choose_layout
from ..runtime.threads import check_busy_setting, set_threads
from .trainer import TrainConfig

H5_SUFFIXES = {".h5", ".hdf5"}
_TRAIN = TrainConfig()  # the model and optimization defaults live there, once
# csbm()'s keywords -> the RunSpec fields (and --csbm-* flags) that set them
CSBM_FIELDS = dict(n="csbm_n", avg_degree="csbm_degree", num_features="csbm_features",
                   num_classes="csbm_classes", homophily="csbm_homophily", signal="csbm_signal")


@dataclass
class RunSpec:
    """Everything one training run needs. The defaults are ``spmmgnn train``'s (tested)."""

    # data
    dataset: str = "csbm"
    csbm_n: int = DEFAULTS["n"]
    csbm_degree: float = DEFAULTS["avg_degree"]
    csbm_features: int = DEFAULTS["num_features"]
    csbm_classes: int = DEFAULTS["num_classes"]
    csbm_homophily: float = DEFAULTS["homophily"]
    csbm_signal: float = DEFAULTS["signal"]
    symmetrize: bool = False
    # model
    model: str = _TRAIN.model
    layers: int = _TRAIN.layers
    hidden: int = _TRAIN.hidden
    dropout: float = _TRAIN.dropout
    input_dropout: float = _TRAIN.input_dropout
    layernorm: bool = _TRAIN.layernorm
    no_cache: bool = False
    label_propagation: float = _TRAIN.label_propagation
    # optimization
    epochs: int = _TRAIN.epochs
    lr: float = _TRAIN.lr
    weight_decay: float = _TRAIN.weight_decay
    seed: int = _TRAIN.seed
    dtype: str = _TRAIN.dtype
    eval_every: int = _TRAIN.eval_every
    # distribution
    algorithm: str = "sparse1d"
    replication: int = 1
    grid: str | None = None
    ranks_per_node: int | None = None
    exchange: str | None = None  # None: ``default_exchange`` chooses
    partitioner: str = "none"
    row_weight: int = 0
    threads: int = 0
    device: str | None = _TRAIN.device
    transport: str = _TRAIN.transport
    codec: str = "none"
    codec_backward: str = "same"
    reorder: str = "none"
    staleness: int = _TRAIN.staleness
    delayed_backward: str = _TRAIN.delayed_backward
    drop_remote: bool = _TRAIN.drop_remote
    grid_layout: bool = _TRAIN.grid_layout
    plexus_blocks: int = _TRAIN.plexus_blocks
    # output
    json: str | None = None
    checkpoint: str | None = _TRAIN.checkpoint
    checkpoint_every: int = _TRAIN.checkpoint_every
    resume: bool = _TRAIN.resume
    overwrite_checkpoint: bool = _TRAIN.overwrite_checkpoint
    quiet: bool = False

    @classmethod
    def from_args(cls, args) -> RunSpec:
        """From ``spmmgnn train``'s parsed flags."""
        return cls(**{f.name: getattr(args, f.name) for f in fields(cls)})


def train_config(spec: RunSpec, progress: bool = True):
    """The ``TrainConfig`` of a run (``progress``: rank 0's progress line)."""
    return TrainConfig(
        model=spec.model, layers=spec.layers, hidden=spec.hidden, dropout=spec.dropout,
        input_dropout=spec.input_dropout, layernorm=spec.layernorm, lr=spec.lr,
        weight_decay=spec.weight_decay, epochs=spec.epochs, seed=spec.seed,
        eval_every=spec.eval_every, checkpoint=spec.checkpoint,
        checkpoint_every=spec.checkpoint_every, resume=spec.resume,
        overwrite_checkpoint=spec.overwrite_checkpoint,
        cache_input_aggregation=not spec.no_cache, progress=progress, dtype=spec.dtype,
        label_propagation=spec.label_propagation, staleness=spec.staleness,
        drop_remote=spec.drop_remote, delayed_backward=spec.delayed_backward,
        grid_layout=spec.grid_layout, device=spec.device, transport=spec.transport,
        plexus_blocks=spec.plexus_blocks)


def op_options(spec: RunSpec) -> dict:
    """DistSpMM options of a run (codecs only when asked for, so every algorithm works
    without them)."""
    options = {} if spec.reorder == "none" else dict(reorder=spec.reorder)
    if spec.exchange not in ("flat", None):
        options["exchange"] = spec.exchange
    if spec.codec == "none" and spec.codec_backward in ("same", "none"):
        return options
    return dict(options, codec=spec.codec, codec_backward=spec.codec_backward,
                codec_seed=spec.seed)


def load_data(spec: RunSpec, grid: ProcessGrid, normalization: str):
    """The LocalData of this rank for ``spec.dataset`` (collective)."""
    from ..partitioners.api import CONTIGUOUS
    from .data import distribute_graph, load_h5_distributed
    from .trainer import DTYPES

    dtype = DTYPES[spec.dtype]
    ds = spec.dataset
    if ds != "csbm" and Path(ds).suffix.lower() in H5_SUFFIXES:
        given = " and ".join(flag for flag, on in (
            ("--partitioner", spec.partitioner not in CONTIGUOUS),
            ("--row-weight", spec.row_weight)) if on)
        agree(grid.comm, "an HDF5 file is already partitioned when written (spmmgnn datasets "
              f"... --parts K --partitioner M [--row-weight W]); drop {given}" if given else
              "--reorder renumbers block rows while one rank distributes the graph; an HDF5 "
              "file is read block by block: drop --reorder" if spec.reorder != "none" else None)
        return load_h5_distributed(ds, grid, normalization, spec.algorithm, seed=spec.seed,
                                   dtype=dtype, **op_options(spec))

    def make():
        if ds == "csbm":
            from ..data.csbm import csbm

            return csbm(**{k: getattr(spec, f) for k, f in CSBM_FIELDS.items()}, seed=spec.seed)
        from ..data.loaders import load_graph

        return load_graph(ds)

    graph = check_on_root(grid.comm, 0, make)
    return distribute_graph(graph, grid, normalization, spec.algorithm, spec.partitioner,
                            seed=spec.seed, dtype=dtype, symmetrize=spec.symmetrize,
                            row_weight=spec.row_weight, **op_options(spec))


def grid_of(spec: RunSpec, comm: MPI.Comm) -> ProcessGrid:
    """The run's grid: ``--grid`` for the 2D/3D algorithms, ``--replication`` otherwise
    (collective; an unknown algorithm or a flag it does not take is one error)."""
    from ..algorithms import ALGORITHMS

    agree(comm, None if spec.algorithm in ALGORITHMS else
          f"unknown algorithm {spec.algorithm!r}; choose one of {sorted(ALGORITHMS)}")
    agree(comm, options_error(spec))
    return ALGORITHMS[spec.algorithm].grid_for(comm, spec.replication, spec.grid,
                                               spec.ranks_per_node, device=spec.device,
                                               transport=spec.transport)


IN_PLACE = ("sparse1d", "sparse15d", "prepost1d")  # they read a node's rows in place


def default_exchange(spec: RunSpec, grid: ProcessGrid) -> str:
    """Collective: the exchange of a run that names none. "node" where it reads the rows in
    place: every rank of the grid shares one node's memory, the algorithm's ghost product
    reads from the node's window (``IN_PLACE``), MPI moves the backend's arrays as they are
    (the host backend over the MPI transport), and nothing asks for messages
    (a codec compresses only between nodes, delayed views keep their own buffers,
    ``--ranks-per-node`` simulates nodes). Otherwise "flat". Measured 1.8-1.9x faster at
    16 x 1 on 16 cores, and the same at 2 x 1 on 2 cores
    (bench/results/node-scaling-16cores.md), 0.97-1.00x flat's epoch at P = 2 on R-MAT and
    SBM graphs with and without METIS (bench/results/node-default.md); on one node its
    numbers are the flat exchange's bit for bit."""
    in_place = grid.backend.mpi_native and grid.transport.name == "mpi"
    plain = (spec.algorithm in IN_PLACE and in_place and spec.codec == "none"
             and spec.codec_backward in ("same", "none") and not spec.staleness
             and not spec.drop_remote and spec.ranks_per_node is None
             and grid.comm.Get_size() > 1)
    return "node" if plain and shares_memory(grid.comm) else "flat"


def options_error(spec: RunSpec) -> str | None:
    """A flag the algorithm does not take (``--codec``, ``--staleness``), said before any
    set-up, naming the algorithms that take it (their capability flags)."""
    from ..algorithms import ALGORITHMS

    algo = ALGORITHMS[spec.algorithm]
    if (spec.codec != "none" or spec.codec_backward not in ("same", "none")) \
            and not algo.takes_codecs:
        takes = sorted(n for n, a in ALGORITHMS.items() if a.takes_codecs)
        return (f"--algorithm {spec.algorithm} does not compress its exchange, so --codec "
                f"does not apply; the algorithms that take codecs: {', '.join(takes)}")
    if (spec.staleness or spec.drop_remote) and not algo.delayed_remote:
        takes = sorted(n for n, a in ALGORITHMS.items() if a.delayed_remote)
        return (f"--staleness and --drop-remote need an algorithm whose remote rows can be "
                f"delayed ({', '.join(takes)}), got --algorithm {spec.algorithm}")
    if spec.grid_layout and spec.algorithm not in GRID_ALGORITHMS:
        return (f"--grid-layout keeps the activations in SUMMA's blocks: it needs --algorithm "
                f"{' or '.join(GRID_ALGORITHMS)}, got {spec.algorithm}")
    if spec.plexus_blocks and spec.algorithm != "plexus3d":
        return (f"--plexus-blocks trains in Plexus's blocks: it needs --algorithm plexus3d, "
                f"got {spec.algorithm}")
    return None


def run_training(spec: RunSpec, comm: MPI.Comm | None = None,
                 on_epoch_end: Callable | None = None, report: bool = True) -> dict:
    """Train as ``spec`` says (collective over ``comm``, default the world). Returns the
    trainer's summary (``ranks`` and ``threads_per_rank`` on rank 0 only). With ``report``
    and not ``spec.quiet``, rank 0 prints the header, the progress and the results on
    stdout; ``spec.json`` is written by rank 0 either way."""
    import torch

    from ..nn.layers import NORMALIZATION
    from .trainer import Trainer

    comm = comm or MPI.COMM_WORLD
    agree_on(comm, {f"RunSpec.{k}": v for k, v in asdict(spec).items()})
    layout = None if spec.threads else choose_layout(comm)
    check_busy_setting(comm)  # (choose_layout checks it too; --threads skips that)
    threads = set_threads(spec.threads or layout.threads)
    torch.set_num_threads(threads)
    config = train_config(spec, progress=report and not spec.quiet)
    agree(comm, config.problem() or (None if config.epochs >= 1 else
                                     f"--epochs must be >= 1, got {config.epochs}"))
    outputs = [(spec.json, "--json output"), (spec.checkpoint, "checkpoint")]
    check_on_root(comm, 0, lambda: [check_writable(p, what) for p, what in outputs if p])
    grid = grid_of(spec, comm)
    if spec.exchange is None:
        spec = replace(spec, exchange=default_exchange(spec, grid))
    data = load_data(spec, grid, NORMALIZATION[spec.model])
    rank0 = comm.rank == 0
    speak = rank0 and report and not spec.quiet
    if speak:
        if layout is not None:   # chosen here, not asked for: say what
            print(layout.line(), flush=True)
        print(header(spec, data, grid, threads), flush=True)
        note = rows_note(spec, data.info)
        if note:
            print(note, flush=True)
    trainer = Trainer(data, config)
    if trainer.start_epoch > config.epochs:  # the same on every rank: no agreement needed
        held = trainer.start_epoch - 1
        raise collective_error(f"the checkpoint {spec.checkpoint} already holds {held} epochs; "
                               f"continue it with --epochs larger than {held}")
    result = trainer.fit(on_epoch_end=on_epoch_end, keep_results=True)
    error = None
    if rank0:
        result["threads_per_rank"] = threads
        result["partition_seconds"] = data.info.get("partition_seconds")
        result["spec"] = asdict(spec)
        if report:
            print(results_text(result), flush=True)
        if spec.json:
            error = save_results(spec.json, json.dumps(result, indent=1))
    agree(comm, error)
    if trainer.save_error:  # the results are out: now the final checkpoint's failure
        raise collective_error(trainer.save_error + (f"; the results are in {spec.json}"
                                                     if spec.json else ""))
    return result


def save_results(path: str, text: str) -> str | None:
    """Write a finished run's results to ``path``; if that fails (a full disk, a device that
    refuses them), save them in the system's temporary folder, or print them on stdout if
    even that fails, and return the error line saying where they went (None: written)."""
    try:
        write_text_atomic(path, text, "--json output")
        return None
    except SpmmgnnError as exc:
        failure = str(exc)
    try:
        with tempfile.NamedTemporaryFile("w", prefix="spmmgnn-results-", suffix=".json",
                                         delete=False) as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(fh.name, default_mode())  # as open() would make it, not mkstemp's 0600
        return f"{failure}; the results were saved to {fh.name} instead"
    except OSError:
        if "fh" in locals():
            Path(fh.name).unlink(missing_ok=True)
    print(text, flush=True)
    return f"{failure}; the results were printed on stdout instead"


def header(spec: RunSpec, data, grid: ProcessGrid, threads: int) -> str:
    """The run's first line: the data, the model and everything that decides the bytes."""
    codec = spec.codec if spec.codec_backward == "same" else \
        f"{spec.codec} (backward {spec.codec_backward})"
    exact = ("0c (remote dropped)" if spec.drop_remote else
             f"cd-{spec.staleness} ({spec.delayed_backward} backward)" if spec.staleness else
             "exact") + (" grid-layout" if spec.grid_layout else "")
    return (f"spmmgnn train: {data.name}: n={data.n} nnz={data.nnz} f={data.num_features} "
            f"classes={data.num_classes} | {spec.model} {spec.layers}x{spec.hidden} "
            f"{spec.dtype} | {spec.algorithm} P={grid.size} {grid.label()} "
            f"partitioner={partition_label(spec, data.info)} codec={codec} "
            f"{exact} | exchange={spec.exchange}, {grid.node_label()} | threads/rank={threads}"
            f" | device={describe(grid.device)}, transport={grid.transport.describe()}")


ROWS_NOTE_RATIO = 1.5  # the largest block row's rows over the average that earn a note


def rows_note(spec: RunSpec, info: dict) -> str | None:
    """A line when one block row holds far more rows than the average: a step's dense part
    (products, ReLU, dropout, loss, per row) runs at that rank's pace, which a partition
    that balances non-zeros alone does not see (``--row-weight``)."""
    from ..partitioners.api import ROW_WEIGHT_GCN
    from ..partitioners.metrics import imbalance

    sizes = info.get("sizes")
    ratio = 1 + imbalance(sizes) if sizes else 1.0
    if ratio < ROWS_NOTE_RATIO:
        return None
    hint = (f"--row-weight {ROW_WEIGHT_GCN} balances rows with non-zeros"
            if not spec.row_weight else f"a larger --row-weight than {spec.row_weight} "
            "weighs rows more")
    where = ("" if info.get("path") == "memory" else
             " (with spmmgnn partition / datasets --parts when the file is written)")
    return (f"note: the largest block row holds {ratio:.2f}x the average rows, and the dense "
            f"part of every step runs at its pace; {hint}{where} (docs/partitioning.md)")


def partition_label(spec: RunSpec, info: dict) -> str:
    """How the block rows were made: the partitioner asked for (with the method it resolved
    to and its seconds), or ``file:<method>`` as stored by ``spmmgnn partition`` /
    ``datasets --parts``, or ``contiguous`` (a file read in contiguous ranges)."""
    from ..partitioners.api import CONTIGUOUS

    if info.get("path") != "memory":
        return str(info.get("partition", "contiguous"))
    if spec.partitioner in CONTIGUOUS:
        return spec.partitioner
    weight = f", row weight {spec.row_weight}" if spec.row_weight else ""
    return (f"{spec.partitioner} ({info.get('partition')}{weight}, "
            f"{info.get('partition_seconds', 0.0):.1f} s)")


def results_text(result: dict) -> str:
    """The ``done:`` line, the final epoch and the best-validation epoch."""
    fin, best = result["final"], result["best"]
    text = done_line(result)
    if "test_acc" in fin:
        text += (f"\nfinal epoch {fin['epoch']}: loss {fin['loss']:.4f}  train "
                 f"{fin['train_acc']:.4f}  val {fin['val_acc']:.4f}  test "
                 f"{fin['test_acc']:.4f}")
    if best:
        text += (f"\nbest-validation epoch {best['epoch']}: val {best['val_acc']:.4f}  "
                 f"test {best['test_acc']:.4f}")
    return text + exchange_line(result)


def exchange_line(result: dict) -> str:
    """How the bytes split between the tiers, and what ``--exchange auto`` chose (rank 0's
    plans), or "" (no ranks gathered)."""
    ranks, ex = result.get("ranks"), result.get("exchange")
    if not ranks or not ex:
        return ""
    sent = sum(r["bytes_sent"] for r in ranks)
    inter = sum(r["bytes_sent_by_tier"]["inter"] for r in ranks)
    shared = sum(r.get("bytes_shared_read", 0) for r in ranks)
    chosen = ", ".join(f"{k}: {v}" for k, v in ex["chosen"].items())
    return (f"\nexchange {ex['option']}{f' ({chosen})' if chosen else ''}: "
            f"{sent / 1e6:.1f} MB sent by all ranks, {inter / 1e6:.1f} MB of it between nodes"
            + (f"; {shared / 1e6:.1f} MB read from other ranks' shared memory" if shared
               else ""))


def done_line(result: dict) -> str:
    """Where the wall time went: the first epoch (JIT compilation or cache load) apart, then
    the steady epoch as training step (rank 0's breakdown) + evaluation + the rest."""
    n, wall = result["epochs_run"], result["wall_seconds"]
    text = f"done: {n} epochs in {wall:.2f} s wall"
    if result.get("partition_seconds"):
        text += f" (after partitioning in {result['partition_seconds']:.1f} s)"
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
