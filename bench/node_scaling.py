"""One node, all its cores (issue 48): every ranks x threads split of the machine's cores, the
machine's rates, and each part of the training step over its floor.

For each split P x T = C (C: the cores this process may run on; every divisor P of C),
``sparse1d`` (1D) and ``sparse2d`` (the most square grid of P): a 2-layer GCN on a CSBM graph
(float32, no cached first-layer aggregation, ``partitioner none``, ``exchange node``:
inside a node the rows are read from shared memory), the median step of ``--epochs`` after
``--warmup`` (the first epochs' kernel set-up and compilation excluded), the slowest rank's
breakdown: ``spmm_local``, ``exchange``, ``allreduce``, ``dense``, ``other``.

Machine rates at T = C threads (and 1): a square float32 GEMM (torch, ``--gemm-n``), a stream
triad (GB/s read + written). Floors of the step on the whole machine:

- ``spmm_local``: every SpMM's gathers, nnz x f x 4 bytes, at the triad rate;
- ``dense``: the products' FLOPs at the GEMM rate plus the elementwise passes
  (``bench.floor.elementwise_bytes``) at the triad rate;
- the step: their sum (no exchange floor inside a node: the rows are read in place).

``--busy`` repeats every split with a second process spinning on one core (the layouts that
wait for their slowest thread lose most). Printed last: the dense part at 1 x C over C x 1
(``sparse1d``), quiet and busy, against issue 48's targets (1.15x and 1.5x). Writes
``bench/results/node-scaling.{json,md}`` (``--out`` to change the stem); the load
(``os.getloadavg``) at start and end goes with them.

    python -m bench.node_scaling --quick            # small graph, a few minutes
    python -m bench.node_scaling --quick --busy     # and again with one core busy
    python -m bench.node_scaling --n 1000000 --features 128 --hidden 128   # the issue's graph
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from bench import RESULTS, ROOT
from bench.floor import elementwise_bytes, gemm_flops
from spmmgnn.benchmark.harness import (
    LaunchError,
    machine,
    now,
    python_module,
    run_mpi,
    threads_env,
)
from spmmgnn.benchmark.rates import gemm_rates, triad_rate
from spmmgnn.benchmark.tables import md_table, publish, where

PARTS = ("spmm_local", "exchange", "allreduce", "dense", "other")
QUICK = dict(n=20_000, degree=12.0, features=64, classes=8, hidden=64)
FULL = dict(n=90_000, degree=22.0, features=128, classes=10, hidden=128)


def splits(cores: int) -> list[tuple[int, int]]:
    """Every (ranks, threads per rank) with ranks x threads = cores."""
    return [(p, cores // p) for p in range(1, cores + 1) if cores % p == 0]


def worker(args) -> None:
    """One training run under mpiexec; rank 0 writes the slowest rank's parts."""
    import torch
    from mpi4py import MPI

    import spmmgnn
    from spmmgnn.algorithms import ALGORITHMS
    from spmmgnn.data.csbm import csbm
    from spmmgnn.training import TrainConfig, Trainer, distribute_graph

    comm = MPI.COMM_WORLD
    if args.copy_shared:  # the A/B: windows whose readers copy the rows (stop 52's path)
        from spmmgnn.exchange import node_exchange
        init = node_exchange.NodePlan.__init__
        node_exchange.NodePlan.__init__ = (
            lambda self, *a, **k: init(self, *a, **{**k, "in_place": False}))
    spmmgnn.set_threads(args.threads)
    torch.set_num_threads(args.threads)
    s = json.loads(args.size)
    g = (csbm(n=s["n"], avg_degree=s["degree"], num_features=s["features"],
              num_classes=s["classes"], seed=0) if comm.rank == 0 else None)
    grid = ALGORITHMS[args.algorithm].grid_for(comm)
    data = distribute_graph(g, grid, "gcn", algorithm=args.algorithm, exchange=args.exchange)
    cfg = TrainConfig(model="gcn", layers=2, hidden=s["hidden"], dropout=0.5, epochs=1,
                      eval_every=0, progress=False, cache_input_aggregation=False)
    trainer = Trainer(data, cfg)
    rows = [trainer.train_step(e) for e in range(1, args.warmup + args.epochs + 1)]
    timed = rows[args.warmup:]
    mine = dict(step=float(np.median([r["seconds"] for r in timed])),
                parts={k: float(np.median([r["breakdown"][k] for r in timed])) for k in PARTS},
                nnz=int(data.op.local_nnz()))
    everyone = comm.gather(mine)
    stats = data.op.comm_stats()
    shared = comm.gather(int(stats.get("bytes_shared_read", 0)))   # 0 before issue 48
    ran = comm.gather(spmmgnn.runtime.threads.running_threads())  # fewer than T: cores were busy
    if comm.rank == 0:
        worst = max(everyone, key=lambda r: r["step"])
        Path(args.result).write_text(json.dumps(dict(
            step=worst["step"], parts=worst["parts"], nnz=sum(r["nnz"] for r in everyone),
            dims=trainer.model.dims, n=data.n, shared_read=sum(shared), ran=min(ran),
            intra_sent=int(stats["bytes_sent_by_tier"]["intra"]))))


def launch(P: int, T: int, algorithm: str, size: dict, epochs: int, warmup: int) -> dict:
    """One training run of ``worker`` on P ranks x T threads; its parts."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.json"
        run_mpi(P, python_module("bench.node_scaling", "--worker", "--threads", str(T),
                                 "--algorithm", algorithm, "--size", json.dumps(size),
                                 "--epochs", str(epochs), "--warmup", str(warmup),
                                 "--result", str(out)),
                env=threads_env(T), timeout=3600, cwd=ROOT)
        return json.loads(out.read_text())


def floors(run: dict, gemm: float, triad: float) -> dict[str, float]:
    """Seconds of the step's parts at the machine's rates (whole machine)."""
    from spmmgnn.nn.layers import trained_widths

    dims = run["dims"]   # A X once (constant input), each later layer's SpMM both ways
    f_calls = [dims[0]] + [2 * w for w in trained_widths(dims)]
    gathers = run["nnz"] * sum(f_calls) * 4
    dense = gemm_flops("gcn", run["dims"], run["n"]) / (gemm * 1e9) + \
        elementwise_bytes(run["dims"], run["n"]) / (triad * 1e9)
    return dict(spmm_local=gathers / (triad * 1e9), dense=dense)


def busy_core() -> subprocess.Popen:
    """A second process spinning on one core (pinned to the last one where possible)."""
    code = "import os\ntry: os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})\n" \
           "except Exception: pass\nwhile True: pass\n"
    return subprocess.Popen([sys.executable, "-c", code])


def ran(r: dict) -> str:
    """`` (ran 1)`` where busy cores left a rank fewer threads than T (``threads.scope``)."""
    return f" (ran {r['ran']})" if r.get("ran", r["T"]) < r["T"] else ""


def table(rows: list[dict]) -> list[str]:
    out = []
    for r in rows:
        p, fl = r["parts"], r["floors"]
        floor = fl["spmm_local"] + fl["dense"]
        out.append([r["load"], f"{r.get('loadavg', 0):.1f}", r["algorithm"],
                    f"{r['P']} x {r['T']}{ran(r)}", f"{r['step'] * 1e3:.1f}",
                    f"{floor * 1e3:.1f}", f"{r['step'] / floor:.2f}",
                    f"{p['spmm_local'] * 1e3:.1f} / {fl['spmm_local'] * 1e3:.1f} = "
                    f"{p['spmm_local'] / fl['spmm_local']:.1f}x", f"{p['exchange'] * 1e3:.1f}",
                    f"{p['allreduce'] * 1e3:.1f}",
                    f"{p['dense'] * 1e3:.1f} / {fl['dense'] * 1e3:.1f} = "
                    f"{p['dense'] / fl['dense']:.1f}x", f"{p['other'] * 1e3:.1f}"])
    return md_table(["spinner", "load avg", "algorithm", "P x T", "step ms", "floor ms",
                     "step / floor", "spmm_local", "exchange", "allreduce", "dense", "other"],
                    out, "lrllrrrlrrlr")


TARGETS = {"no spinner": 1.15, "one core busy": 1.5}  # issue 48: dense 1 x C over C x 1


def ratios(rows: list[dict], cores: int) -> list[str]:
    """The dense part of one rank with every core's thread over that of a rank per core
    (``sparse1d``), quiet and with one core busy, against issue 48's targets."""
    out = []
    for load, target in TARGETS.items():
        dense = {(r["P"], r["T"]): r["parts"]["dense"] for r in rows
                 if r["load"] == load and r["algorithm"] == "sparse1d"}
        one, many = dense.get((1, cores)), dense.get((cores, 1))
        if one is None or many is None or cores == 1:
            continue
        ratio = one / many
        verdict = "meets" if ratio <= target else "misses"
        out.append(f"dense 1 x {cores} / {cores} x 1, {load}: {one * 1e3:.1f} / "
                   f"{many * 1e3:.1f} ms = {ratio:.2f}x ({verdict} the target <= {target}x)")
    return out


def render(data: dict) -> str:
    """The rates, every run's parts over their floors, and the verdicts against issue 48's
    targets, from the run's JSON."""
    size, start, end = data["size"], data["loadavg_start"], data["loadavg_end"]
    md = [f"# One node, all its cores ({data['when']})", "",
          f"`{data['command']}` on {data['cores']} cores ({where(data['machine'])}); "
          f"1-minute load average {start[0]:.1f} at the start, {end[0]:.1f} at "
          "the end (a lagging average: it counts this benchmark's own ranks, its "
          "spinner and whatever ran just before, not only other work).", "",
          f"CSBM n={size['n']}, degree {size['degree']}, {size['features']} features, "
          f"hidden {size['hidden']}, {size['classes']} classes; 2-layer GCN, float32, no "
          f"cached aggregation, `exchange=node`; median of {data['epochs']} steps after "
          f"{data['warmup']}; the slowest rank's parts, ms.", ""]
    md += md_table(["threads", "GEMM GFLOP/s (torch)", "triad GB/s"],
                   [[t, f"{r['gemm']:.1f}", f"{r['triad']:.1f}"]
                    for t, r in data["rates"].items()], "rrr")
    md += ["", *table(data["runs"]), "",
           *(f"- {line}" for line in ratios(data["runs"], data["cores"])), "",
           *(f"- failed: {line}" for line in data["failed"]), "",
           "Each part: measured / floor = ratio; the floor is the whole machine's at the "
           "best rates measured (see the script's docstring); `exchange` and `allreduce` "
           "have none inside a node. `load avg`: the 1-minute load average after each run."]
    return "\n".join(md) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the small graph (a few minutes)")
    ap.add_argument("--busy", action="store_true", help="also with one core kept busy")
    ap.add_argument("--n", type=int)
    ap.add_argument("--features", type=int)
    ap.add_argument("--hidden", type=int)
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--gemm-n", type=int, default=2048)
    ap.add_argument("--out", default=str(RESULTS / "node-scaling"))
    ap.add_argument("--algorithms", default="sparse1d,sparse2d",
                    help="comma-separated (default sparse1d,sparse2d)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--algorithm", default="sparse1d", help=argparse.SUPPRESS)
    ap.add_argument("--size", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    ap.add_argument("--exchange", default="node", help=argparse.SUPPRESS)
    ap.add_argument("--copy-shared", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    size = dict(QUICK if args.quick else FULL)
    for key in ("n", "features", "hidden"):
        if getattr(args, key):
            size[key] = getattr(args, key)
    cores = len(os.sched_getaffinity(0))
    load_start = os.getloadavg()
    rates = {t: dict(gemm=max(gemm_rates(args.gemm_n, t, 3).values()),
                     triad=triad_rate(t, 3)) for t in sorted({1, cores})}
    print(f"rates: {rates}", flush=True)
    # the floors take the best rate seen (a loaded machine can only make a rate look lower)
    gemm, triad = (max(r[k] for r in rates.values()) for k in ("gemm", "triad"))
    rows: list[dict] = []
    failed: list[str] = []

    command = ("python -m bench.node_scaling " + " ".join(sys.argv[1:])).strip()

    def write() -> None:
        """The JSON and table of every run so far: a killed or failing sweep keeps them."""
        publish(args.out, dict(command=command, cores=cores, machine=machine(), size=size,
                               epochs=args.epochs, warmup=args.warmup, rates=rates,
                               loadavg_start=load_start, loadavg_end=os.getloadavg(),
                               runs=rows, failed=failed, when=now()), render)

    for load in ("no spinner", "one core busy") if args.busy else ("no spinner",):
        spinner = busy_core() if load != "no spinner" else None
        try:
            for P, T in splits(cores):
                for algorithm in args.algorithms.split(","):
                    try:
                        run = launch(P, T, algorithm, size, args.epochs, args.warmup)
                    except LaunchError as exc:
                        failed.append(f"{load}, {algorithm} {P} x {T}: "
                                      f"{str(exc).strip().splitlines()[-1]}")
                        print(failed[-1], flush=True)
                        write()
                        continue
                    run.update(load=load, algorithm=algorithm, P=P, T=T,
                               loadavg=os.getloadavg()[0], floors=floors(run, gemm, triad))
                    rows.append(run)
                    print(table([run])[-1], flush=True)
                    write()
        finally:
            if spinner is not None:
                spinner.kill()
                spinner.wait()
    for line in ratios(rows, cores):
        print(line, flush=True)
    write()
    print(f"wrote {args.out}.md", flush=True)


if __name__ == "__main__":
    main()
