"""One run of a sweep, executed collectively: a timed bare SpMM or a short GCN training,
returned as the dict that becomes its results line (on rank 0; None elsewhere)."""

from __future__ import annotations

import sys
import time

import numpy as np
from mpi4py import MPI

from ..runtime.errors import SpmmgnnError, agree, check_on_root
from ..runtime.wire import bcast_json, gather_json
from .harness import machine

PHASES = ("local", "exchange", "allreduce", "codec", "dense", "other")


class PartitionCache:
    """Partitions computed on the root, once per (graph, k, method) within a sweep."""

    def __init__(self):
        self._parts: dict = {}

    def get(self, comm: MPI.Comm, graph_spec: str, A, k: int, method: str, seed: int,
            parts_per_node: int | None = None):
        """Collective: the root's ``Partition`` and its seconds (``parts_per_node``: the
        block rows of one node, for the ``twolevel:`` methods)."""
        key = (graph_spec, k, method, seed, parts_per_node)
        if key not in self._parts:
            from ..partitioners import partition

            got = check_on_root(comm, 0, lambda: partition(A, k, method=method, seed=seed,
                                                           parts_per_node=parts_per_node))
            self._parts[key] = (got, got.seconds if got is not None else 0.0)
        return self._parts[key]


def spmm_run(comm: MPI.Comm, run: dict, A, parts: PartitionCache) -> dict | None:
    """Time ``run["repeat"]`` calls of ``matmul`` after a warm-up; the breakdown is the
    slowest rank's per phase, bytes are per rank and per call."""
    from ..algorithms import ALGORITHMS, DistSpMM
    from .graphs import features_for

    grid = ALGORITHMS[run["algorithm"]].grid_for(comm, run["c"], run.get("grid"),
                                                 run.get("ranks_per_node"),
                                                 transport=run.get("transport", "auto"))
    part, part_seconds = parts.get(comm, run["graph"], A, grid.n_block_rows,
                                   run["partitioner"], run["seed"], grid.block_rows_per_node)
    opts = {} if run["codec"] == "none" else dict(codec=run["codec"])
    if run.get("exchange", "flat") != "flat":
        opts["exchange"] = run["exchange"]
    op = DistSpMM.from_scipy(A, grid, algorithm=run["algorithm"], partition=part,
                             validate=False, **opts)
    X = features_for(A.shape[0], run["f"], run["seed"], run["dtype"]) if comm.rank == 0 else None
    x = op.scatter_rows(X)
    y = op.matmul(x)  # warm-up: numba compilation, buffers
    op.reset_stats()
    comm.Barrier()
    t0 = time.perf_counter()
    for _ in range(run["repeat"]):
        y = op.matmul(x)
    comm.Barrier()
    wall = (time.perf_counter() - t0) / run["repeat"]
    s, r = op.comm_stats(), run["repeat"]
    mine = dict(local=s["seconds_multiply"] / r, exchange=s["seconds_exchange"] / r,
                allreduce=s["seconds_allreduce"] / r, codec=s["seconds_codec"] / r,
                bytes_sent=s["bytes_sent"] // r, bytes_received=s["bytes_received"] // r,
                bytes_sent_inter=s["bytes_sent_by_tier"]["inter"] // r,
                bytes_received_inter=s["bytes_received_by_tier"]["inter"] // r,
                bytes_sent_convert=s["bytes_sent_by_phase"]["convert"] // r,
                allreduce_bytes=s["allreduce_bytes"] // r, nnz=op.local_nnz(),
                rows=op.n_local, kernels=s["kernels"])
    ranks = gather_json(comm, mine, root=0)
    full = op.gather_rows(y)
    if comm.rank != 0:
        return None
    ref = A.astype(run["dtype"]) @ X
    err = float(np.abs(full - ref).max() / max(1e-30, float(np.abs(ref).max())))
    breakdown = {k: max(q[k] for q in ranks) for k in ("local", "exchange", "allreduce",
                                                        "codec")}
    breakdown["dense"] = 0.0
    breakdown["other"] = max(0.0, wall - sum(breakdown.values()))
    return dict(seconds=wall, unit="spmm", breakdown=breakdown, max_rel_error=err,
                n=int(A.shape[0]), nnz=int(A.nnz), partition_seconds=part_seconds,
                kernels=[q["kernels"] for q in ranks], exchange_report=s["exchange"],
                per_rank={k: [q[k] for q in ranks] for k in ("bytes_sent", "bytes_received",
                                                              "bytes_sent_inter",
                                                              "bytes_received_inter",
                                                              "bytes_sent_convert",
                                                              "allreduce_bytes", "nnz",
                                                              "rows")})


def train_spec(run: dict):
    """The ``RunSpec`` of a sweep's training point: ``spmmgnn train`` with these flags."""
    from ..training.run import CSBM_FIELDS, RunSpec
    from .graphs import parse_spec

    name, kw = parse_spec(run["graph"])
    if name == "file":
        data = dict(dataset=kw["path"])
    elif name == "csbm":
        data = {CSBM_FIELDS[k]: v for k, v in kw.items() if k in CSBM_FIELDS}
    else:
        raise SpmmgnnError(f"train mode needs features and labels: graph {run['graph']!r} "
                           "has none (use csbm:... or a graph file with features)")
    return RunSpec(**data, algorithm=run["algorithm"], replication=int(run["c"]),
                   grid=run.get("grid"), exchange=run.get("exchange", "flat"),
                   ranks_per_node=run.get("ranks_per_node"),
                   partitioner=run["partitioner"], codec=run["codec"], hidden=int(run["f"]),
                   layers=int(run["layers"]), epochs=int(run["epochs"]),
                   eval_every=int(run["epochs"]), dtype=run["dtype"], seed=int(run["seed"]),
                   no_cache=not run["cache"], quiet=True, device=run.get("device"),
                   transport=run.get("transport", "auto"),
                   grid_layout=bool(run.get("grid_layout", False)),
                   plexus_blocks=int(run.get("plexus_blocks", 0)))


def layout_of(run: dict) -> str:
    """Where a training run keeps its activations: ``rows`` (the row layout, converted on
    every SpMM call), ``grid`` (SUMMA's blocks) or ``plexus:K`` (Plexus's, K row blocks)."""
    if run.get("grid_layout"):
        return "grid"
    return f"plexus:{run['plexus_blocks']}" if run.get("plexus_blocks") else "rows"


def train_run(comm: MPI.Comm, run: dict) -> dict | None:
    """GCN training through the ``train`` command's own code (``run_training``: same work),
    summarised."""
    from ..training.run import run_training

    spec, error = None, None
    try:
        spec = train_spec(run)
    except SpmmgnnError as exc:
        error = str(exc)
    agree(comm, error)
    result = run_training(spec, comm, report=False)
    if comm.rank != 0:
        return None
    b = result["breakdown"]
    breakdown = dict(local=b["spmm_local"], exchange=b["exchange"], allreduce=b["allreduce"],
                     codec=0.0, dense=b["dense"], other=b["other"])
    calls = max(1, result["epochs_run"] + 1)
    return dict(seconds=result["epoch_seconds"], unit="epoch", breakdown=breakdown,
                layout=layout_of(run),
                accuracy=result["final"].get("test_acc"), accuracy_of="final epoch",
                best_accuracy=(result["best"] or {}).get("test_acc"), final=result["final"],
                best=result["best"], diverged_at=result.get("diverged_at"),
                n=int(result["n"]), nnz=int(result["nnz"]), epochs_run=result["epochs_run"],
                exchange_report=result.get("exchange"),
                per_rank=dict(bytes_sent=[q["bytes_sent"] // calls for q in result["ranks"]],
                              bytes_received=[q["bytes_received"] // calls
                                              for q in result["ranks"]],
                              bytes_sent_inter=[q["bytes_sent_by_tier"]["inter"] // calls
                                                for q in result["ranks"]],
                              bytes_received_inter=[q["bytes_received_by_tier"]["inter"] // calls
                                                    for q in result["ranks"]],
                              bytes_sent_convert=[q["bytes_sent_by_phase"]["convert"] // calls
                                                  for q in result["ranks"]],
                              allreduce_bytes=[q["allreduce_bytes"] // calls
                                               for q in result["ranks"]],
                              rows=[q["rows"] for q in result["ranks"]]),
                kernels=[q.get("kernels", {}) for q in result["ranks"]],
                bytes_note="per epoch (cumulative bytes / (epochs + 1 evaluation))")


class Bar:
    """A progress bar on rank 0's stderr: redrawn in place on a terminal, a line per run
    otherwise."""

    def __init__(self, total: int, enabled: bool):
        self.total, self.enabled, self.done = total, enabled and total > 0, 0
        self.tty = sys.stderr.isatty()
        self.t0 = time.perf_counter()

    def step(self, label: str, skipped: bool = False) -> None:
        self.done += 1
        if not self.enabled:
            return
        frac = self.done / self.total
        fill = int(24 * frac)
        elapsed = time.perf_counter() - self.t0
        text = (f"[{'#' * fill}{'.' * (24 - fill)}] {self.done}/{self.total} "
                f"{elapsed:5.0f}s {'skip ' if skipped else ''}{label}")
        if self.tty:
            sys.stderr.write("\r" + text[:120].ljust(120) + ("\n" if self.done == self.total
                                                             else ""))
        else:
            sys.stderr.write(text + "\n")
        sys.stderr.flush()


def run_sweep(comm: MPI.Comm, cfg, results: str, threads: int,
              progress: bool = True) -> tuple[int, int, int]:
    """Run every point of the sweep ``cfg`` not already recorded as done in ``results``,
    appending one record per run (on rank 0); collective. A run's collective SpmmgnnError
    is recorded as its ``error`` and the sweep goes on. Returns (ran, skipped, failed)."""
    from .. import __version__
    from .graphs import make_graph
    from .records import append_record, done_ids
    from .sweep import no_runs_error, runs

    todo = runs(cfg, comm.size)
    if not todo:
        raise no_runs_error(cfg, comm.size)
    got = check_on_root(comm, 0, lambda: done_ids(results))
    done, retry = bcast_json(comm, None if got is None else [sorted(got[0]), got[1]])
    done = set(done)
    if comm.rank == 0 and retry:
        print(f"spmmgnn bench: {retry} failed run(s) in {results} will run again", flush=True)
    bar = Bar(len(todo), enabled=comm.rank == 0 and progress)
    info = dict(version=__version__, machine=machine(), threads_per_rank=threads)
    parts = PartitionCache()
    graphs: dict = {}
    ran = skipped = failed = 0
    for r in todo:
        label = (f"{r['mode']} {r['algorithm']} c={r['c']} {r['partitioner']} {r['codec']} "
                 f"f={r['f']}" + ("" if r["mode"] == "spmm" else f" {layout_of(r)}"))
        if r["run_id"] in done:
            skipped += 1
            bar.step(label, skipped=True)
            continue
        error = None
        try:
            if r["mode"] == "spmm":
                if r["graph"] not in graphs:
                    graphs.clear()  # one graph in memory at a time
                    g = check_on_root(comm, 0, lambda r=r: make_graph(r["graph"]))
                    graphs[r["graph"]] = g.adj if g is not None else None
                result = spmm_run(comm, r, graphs[r["graph"]], parts)
            else:
                result = train_run(comm, r)
        except SpmmgnnError as exc:
            if not exc.collective and comm.size > 1:
                raise
            error, result = str(exc), {}
        rec = dict(r, **info, time=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        rec.update(result or {})
        if error:
            rec["error"] = error
        check_on_root(comm, 0, lambda rec=rec: append_record(results, rec))
        ran += 1
        failed += error is not None
        bar.step(label)
    return ran, skipped, failed
