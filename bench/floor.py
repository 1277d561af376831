"""The training step against the machine's floor (issue 38): each part's measured time over
the time the hardware needs for its work, and the whole step over the sum of those floors.

Machine floors, measured here (2 threads = the whole machine, and 1 thread):

- ``gemm``: GFLOP/s of a square float32 product (``--gemm-n``, 4096 by default) with numpy's
  BLAS and with torch's; the floor uses the faster;
- ``bandwidth``: a stream triad ``a = b + s c`` over arrays 8x the last-level cache (numba,
  bytes read + written);
- ``gather``: issue 22's random-row gather bound (``benchmark.rates.gather_rates``) at each
  width the step's SpMMs run, x in L3 and in DRAM;
- ``network``: ``mpiexec -n 2``: ping-pong alpha and beta and an ``Allreduce`` fit over the
  same sizes (``benchmark.network``).

Per part of a training step (GCN and SAGE, 2 layers, two CSBM sizes, P = 1 x 2 threads and
P = 2 x 1 thread, sparse1d, float32), measured in one ``mpiexec`` run each:

- the step and its trainer breakdown (``spmm_local``, ``exchange``, ``allreduce``, ``dense``,
  ``other``): medians of ``--epochs`` steps after ``--warmup``;
- ``dense`` split by ``torch.profiler`` over ``--profiled`` more steps: ``gemm`` (matrix
  products), ``elementwise`` (bias, ReLU, dropout and their gradients), ``copy`` (copies and
  layout conversions), ``loss`` (cross-entropy forward and backward), ``optimizer`` (Adam),
  ``autograd`` (the engine's own time) and ``python`` (the rest of forward + backward).

The floors count the work of the whole step on the whole machine (all ranks, 2 cores), so a
layout's imbalance and its idle core count against it:

- ``spmm_local``: every SpMM the step runs (widths as recorded): nnz x f x 4 bytes at the
  gather rate of its x (L3 if x fits the last-level cache, else DRAM);
- ``gemm``: the model's products (forward, weight gradients, input gradients) at the peak;
- ``elementwise``: one pass per operation: bias + ReLU + dropout (read z, write h), its
  backward (read h and the gradient, write one), each bias gradient (read the gradient);
  ``loss``: read the training rows' logits, write the logits' gradient; ``optimizer``: Adam
  reads the parameter, its gradient and two moments, writes three; each at the bandwidth;
- ``exchange``: per SpMM, each rank's messages x alpha + its bytes x beta (the slower rank);
  ``allreduce``: alpha + the gradient buffer x beta (P = 2; none at P = 1);
- ``copy``, ``autograd``, ``python``, ``other``: 0 (no work the step needs).

    python -m bench.floor --label before     # writes bench/results/floor.{json,md}
    python -m bench.floor --label after      # keeps the other labels' rows
    python -m bench.floor --quick            # small graphs, a smoke run
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import RESULTS, ROOT
from spmmgnn.benchmark.harness import (
    interleaved,
    machine,
    python_module,
    run_mpi,
    threads_env,
    uptime,
)
from spmmgnn.benchmark.rates import gather_rates, gemm_rates, triad_rate
from spmmgnn.benchmark.tables import md_table, publish, regenerate

SIZES = {  # name -> CSBM and model widths
    "small": dict(n=20_000, degree=16.0, features=64, classes=8, hidden=64),
    "large": dict(n=90_000, degree=22.0, features=128, classes=10, hidden=128),
}
QUICK = {"small": dict(n=4_000, degree=8.0, features=32, classes=4, hidden=16),
         "large": dict(n=12_000, degree=12.0, features=64, classes=8, hidden=64)}
LAYOUTS = ((1, 2), (2, 1))  # (P, threads per rank)
MODELS = ("gcn", "sage")
PARTS = ("spmm_local", "exchange", "allreduce", "gemm", "elementwise", "copy", "loss",
         "optimizer", "autograd", "python", "other")
ITEM = 4  # float32


# ---------------------------------------------------------------- machine floors
def gemm_shapes(sizes: dict, threads: int, repeat: int) -> list[dict]:
    """Each product shape of the sizes' steps on each BLAS and orientation, ``threads``
    threads: ``h @ w`` and ``g @ w.T`` (n x a x c) with numpy writing into a reused array and
    with torch; the weight gradient as ``h.T @ g`` and as ``(g.T @ h).T`` on each."""
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(threads)
    rng = np.random.default_rng(1)
    rows = []
    shapes = sorted({(s["n"], a, b) for s in sizes.values()
                     for a, b in ((s["features"], s["hidden"]), (s["hidden"], s["classes"]))})
    with threadpool_limits(limits=threads, user_api="blas"):
        for n, a, c in shapes:
            h = rng.standard_normal((n, a)).astype(np.float32)
            w = rng.standard_normal((a, c)).astype(np.float32)
            g = rng.standard_normal((n, c)).astype(np.float32)
            best = interleaved(_shape_fns(h, w, g), repeat)
            rows.append(dict(n=n, a=a, c=c, threads=threads, seconds=best,
                             gflops={k: 2 * n * a * c / v / 1e9 for k, v in best.items()}))
            print(f"  {n}x{a}x{c} T={threads}: " + ", ".join(
                f"{k} {v * 1e3:.1f} ms" for k, v in best.items()), flush=True)
    return rows


def _shape_fns(h: np.ndarray, w: np.ndarray, g: np.ndarray) -> dict:
    import torch

    o_hw = np.empty((h.shape[0], w.shape[1]), np.float32)
    o_gw = np.empty((g.shape[0], w.shape[0]), np.float32)
    th, tw, tg = (torch.from_numpy(v) for v in (h, w, g))
    return {"h@w numpy": lambda: np.matmul(h, w, out=o_hw), "h@w torch": lambda: th @ tw,
            "g@w.T numpy": lambda: np.matmul(g, w.T, out=o_gw),
            "g@w.T torch": lambda: tg @ tw.t(),
            "h.T@g numpy": lambda: h.T @ g, "(g.T@h).T numpy": lambda: (g.T @ h).T,
            "h.T@g torch": lambda: th.t() @ tg, "(g.T@h).T torch": lambda: (tg.t() @ th).t()}


def machine_floors(widths: list[int], gemm_n: int, repeat: int, sizes: dict) -> dict:
    """Every machine rate the floors use, at 1 and 2 threads (network: 2 ranks), and the
    step's product shapes on each BLAS."""
    from spmmgnn.local import kernels

    out = dict(llc_bytes=kernels.LLC_BYTES, gemm={}, bandwidth={}, gather={}, shapes=[])
    for t in (1, 2):
        out["gemm"][t] = gemm_rates(gemm_n, t, repeat)
        out["shapes"] += gemm_shapes(sizes, t, max(3, repeat))
        out["bandwidth"][t] = triad_rate(t, repeat)
        out["gather"][t] = gather_rates(t, repeat, False, widths=widths)
        print(f"  {t} thread(s): gemm {out['gemm'][t]}, triad {out['bandwidth'][t]:.1f} GB/s",
              flush=True)
    out["network"] = _launch(["--worker", "network"], 2, 1)
    return out


def worker_network() -> dict | None:
    from mpi4py import MPI

    from spmmgnn.benchmark.network import all_reduce, ping_pong

    comm = MPI.COMM_WORLD
    pp = ping_pong(comm)
    reduce = all_reduce(comm)
    if comm.rank:
        return None
    return dict(alpha=pp["alpha"], beta=pp["beta"], ping_pong=pp, allreduce=reduce)


# ---------------------------------------------------------------- one training run
def classify(name: str) -> str | None:
    """The part an op (or a range) belongs to; None: its time goes to the part of the
    enclosing event (or to ``autograd`` / ``python`` at the top)."""
    low = name.lower()
    if name == "spmmgnn.optimizer":
        return "optimizer"
    if "spmmfunction" in low:
        return "spmm"
    if any(k in low for k in ("cross_entropy", "log_softmax", "nll_loss", "nllloss",
                              "logsoftmax", "index_select", "indexselect", "nonzero")):
        return "loss"
    if any(k in low for k in ("aten::mm", "aten::addmm", "aten::matmul", "aten::bmm",
                              "mmbackward", "gemm", "linear")):
        return "gemm"
    if any(k in low for k in ("copy", "contiguous", "clone", "to_copy", "expand")):
        return "copy"
    if low.startswith("autograd::") or low.endswith("backward0") and "add" not in low:
        return None
    if low.startswith("aten::") or "dropout" in low or "relu" in low or "backward" in low:
        return "elementwise"
    return None


def split_profile(events) -> dict[str, float]:
    """Seconds per part from a profiler's events: each event's self time goes to its own
    part, or its nearest classified ancestor's (the outermost classified one wins)."""
    out: dict[str, float] = {}

    def walk(ev, inherited):
        part = inherited or classify(ev.name)
        own = part or ("autograd" if ev.name.startswith("autograd::") else "python")
        out[own] = out.get(own, 0.0) + ev.self_cpu_time_total / 1e6
        for child in ev.cpu_children:
            walk(child, part)

    for ev in events:
        if ev.cpu_parent is None:
            walk(ev, None)
    return out


def worker_train(args) -> dict | None:
    import torch
    from mpi4py import MPI

    import spmmgnn
    from spmmgnn.data.csbm import csbm
    from spmmgnn.nn.layers import NORMALIZATION
    from spmmgnn.training import TrainConfig, Trainer, distribute_graph

    comm = MPI.COMM_WORLD
    spmmgnn.set_threads(args.threads)
    torch.set_num_threads(args.threads)
    s = json.loads(args.size)
    g = (csbm(n=s["n"], avg_degree=s["degree"], num_features=s["features"],
              num_classes=s["classes"], seed=0) if comm.rank == 0 else None)
    grid = spmmgnn.ProcessGrid(comm)
    data = distribute_graph(g, grid, NORMALIZATION[args.model], algorithm="sparse1d")
    cfg = TrainConfig(model=args.model, layers=2, hidden=s["hidden"], dropout=0.5, lr=0.01,
                      weight_decay=5e-4, epochs=1, eval_every=0, progress=False)
    trainer = Trainer(data, cfg)
    op = data.op
    calls: list[tuple[str, int]] = []
    matmul, matmul_t = op.matmul, op.matmul_t

    def rec_matmul(x, stream=None):
        calls.append(("A", int(x.shape[1])))
        return matmul(x, stream)

    def rec_matmul_t(y, stream=None):
        calls.append(("At", int(y.shape[1])))
        return matmul_t(y, stream)

    op.matmul, op.matmul_t = rec_matmul, rec_matmul_t
    step = trainer.optimizer.step

    def named_step():
        with torch.profiler.record_function("spmmgnn.optimizer"):
            step()

    rows = []
    for epoch in range(1, args.warmup + args.epochs + 1):
        calls.clear()
        rows.append(trainer.train_step(epoch))
    step_calls = list(calls)
    timed = rows[args.warmup:]
    trainer.optimizer.step = named_step
    parts: dict[str, float] = {}
    profiled = []
    for epoch in range(args.profiled):
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            row = trainer.train_step(args.warmup + args.epochs + 1 + epoch)
        profiled.append(row)
        for k, v in split_profile(prof.events()).items():
            parts[k] = parts.get(k, 0.0) + v / args.profiled
    trainer.optimizer.step = step
    mine = dict(
        rank=comm.rank, rows=op.n_local, rows_in=op.n_local_in,
        nnz=int(op.local_nnz()),
        ghost_rows=int(getattr(getattr(op, "plan", None), "n_ghost", 0)),
        send_rows=int(getattr(getattr(op, "plan", None), "n_send", 0)),
        peers=int(np.count_nonzero(getattr(getattr(op, "plan", None), "send_counts",
                                           np.zeros(1)))),
        train_rows=int(trainer.loss_mask.sum()),
        step=float(np.median([r["seconds"] for r in timed])),
        breakdown={k: float(np.median([r["breakdown"][k] for r in timed]))
                   for k in timed[0]["breakdown"]},
        profiled_step=float(np.mean([r["seconds"] for r in profiled])) if profiled else 0.0,
        profiled_breakdown={k: float(np.mean([r["breakdown"][k] for r in profiled]))
                            for k in profiled[0]["breakdown"]} if profiled else {},
        profile=parts, calls=step_calls, kernels=op.comm_stats()["kernels"])
    ranks = comm.gather(mine, root=0)
    if comm.rank:
        return None
    params = [p.numel() for p in trainer.params]
    return dict(model=args.model, size=s, P=comm.size, threads=args.threads, n=data.n,
                nnz=data.nnz, params=params, dims=trainer.model.dims, ranks=ranks,
                final_loss=rows[-1]["loss"])


def _launch(extra: list[str], P: int, threads: int, timeout: float = 1800) -> dict:
    """One worker of this module on P ranks x ``threads`` threads; its result."""
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "r.json"
        run_mpi(P, python_module("bench.floor", *extra, "--result", str(result), "--threads",
                                 str(threads)),
                env=threads_env(threads), timeout=timeout, cwd=ROOT)
        return json.loads(result.read_text())


# ---------------------------------------------------------------- floors of a run
def gemm_flops(kind: str, dims: list[int], n: int) -> float:
    """FLOPs of a step's matrix products over all n rows: per layer a -> b, forward n a b
    (twice for SAGE's two weights), the weight gradients as many, the input gradient as
    many again except for the first layer (its input is constant)."""
    per = 2 if kind == "sage" else 1
    total = 0.0
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:], strict=True)):
        mult = 2 + (1 if i > 0 else 0)
        total += per * mult * 2.0 * n * a * b
    return total


def elementwise_bytes(dims: list[int], n: int) -> float:
    """Bytes of the step's elementwise passes: hidden layers: bias + ReLU + dropout forward
    (read z, write h) and backward (read h and the gradient, write one); every layer's bias
    gradient (read the gradient), and the output's bias add (read, write)."""
    total = 0.0
    for h in dims[1:-1]:
        total += (2 + 3 + 1) * n * h * ITEM
    c = dims[-1]
    return total + (2 + 1) * n * c * ITEM


def floors(run: dict, mach: dict) -> dict[str, float]:
    """Seconds of each part at the machine's floor (whole step, whole machine)."""
    T = 2  # the machine's cores: every layout's floor is the machine's
    peak = max(mach["gemm"][str(T)].values()) * 1e9
    bw = mach["bandwidth"][str(T)] * 1e9
    gather = mach["gather"][str(T)]
    llc = mach["llc_bytes"]
    n, c = run["n"], run["dims"][-1]
    out = dict.fromkeys(PARTS, 0.0)
    for r in run["ranks"]:
        for _, f in r["calls"]:
            x_rows = r["rows_in"] + r["ghost_rows"]
            regime = "L3" if x_rows * f * ITEM <= llc else "DRAM"
            rate = _rate_at(gather[regime], f)
            out["spmm_local"] += r["nnz"] * f * ITEM / (rate * 1e9)
    out["gemm"] = gemm_flops(run["model"], run["dims"], n) / peak
    out["elementwise"] = elementwise_bytes(run["dims"], n) / bw
    train = sum(r["train_rows"] for r in run["ranks"]) / max(1, run["P"]) * run["P"]
    out["loss"] = (train + n) * c * ITEM / bw
    out["optimizer"] = 7 * sum(run["params"]) * ITEM / bw * run["P"]  # every rank steps
    if run["P"] > 1:
        net = mach["network"]
        per_call = [max(r["peers"] * net["alpha"] + r["send_rows"] * f * ITEM * net["beta"]
                        for r in run["ranks"]) for _, f in run["ranks"][0]["calls"]]
        out["exchange"] = float(sum(per_call))
        out["allreduce"] = net["alpha"] + (sum(run["params"]) + 2) * ITEM * net["beta"]
    return out


def _rate_at(rates: dict, f: int) -> float:
    """The gather GB/s measured at width f (or the nearest measured width)."""
    widths = sorted(int(w) for w in rates)
    near = min(widths, key=lambda w: abs(w - f))
    return rates[str(near)] if str(near) in rates else rates[near]


def measured(run: dict) -> dict[str, float]:
    """Seconds of each part as measured, per step: the slowest rank's trainer parts, its
    dense time split in the profiler's proportions."""
    worst = max(run["ranks"], key=lambda r: r["step"])
    b = worst["breakdown"]
    out = dict.fromkeys(PARTS, 0.0)
    out["spmm_local"], out["exchange"], out["allreduce"] = (b["spmm_local"], b["exchange"],
                                                            b["allreduce"])
    prof = worst["profile"]
    parts = {k: v for k, v in prof.items() if k not in ("spmm", "python")}
    # the SpMM function's time beyond its timed multiply and exchange (allocation, checks)
    # and the Python between the ops: the profiled dense time the events do not cover
    profiled_dense = worst["profiled_breakdown"].get("dense", 0.0)
    parts["python"] = max(0.0, profiled_dense - sum(parts.values()))
    total = sum(parts.values())
    for k, v in parts.items():  # in the profiled proportions, scaled to the unprofiled dense
        out[k] = b["dense"] * v / total if total > 0 else 0.0
    out["other"] = b["other"]
    return out


# ---------------------------------------------------------------- report
def render(data: dict) -> str:
    """Per label (a run of the script): the machine's rates, the step's product shapes, the
    network, and each run's parts over their floors."""
    lines = ["# The training step at the machine's floor", "",
             "Written by `python bench/floor.py` (issue 38). Floors: the whole step's work on "
             "the whole machine (2 cores) at the rates measured in the same run; the "
             "measured time is the slowest rank's. `time / floor` per part, and the step "
             "over the sum of the floors.", ""]
    for label, entry in data["labels"].items():
        m = entry["machine"]
        lines += [f"## {label}", "", f"Run {entry['when']}, load before: `{entry['uptime']}`."
                  + (f" {entry['note']}" if entry.get("note") else ""), ""]
        rates = [[f"GEMM {m['gemm_n']}^3 {name} (GFLOP/s)", f"{m['gemm']['1'][name]:.1f}",
                  f"{m['gemm']['2'][name]:.1f}"] for name in ("numpy", "torch")]
        rates.append(["triad (GB/s)", f"{m['bandwidth']['1']:.1f}", f"{m['bandwidth']['2']:.1f}"])
        rates += [[f"gather f={f}, x in {regime} (GB/s)", f"{m['gather']['1'][regime][f]:.1f}",
                   f"{v:.1f}"] for regime in ("L3", "DRAM")
                  for f, v in m["gather"]["2"][regime].items()]
        lines += md_table(["rate", "1 thread", "2 threads"], rates, "lrr")
        if m.get("shapes"):
            keys = list(m["shapes"][0]["seconds"])
            lines += ["", "The step's products (n x a x c), ms (best of the run):", ""]
            lines += md_table(["n x a x c", "T", *keys],
                              [[f"{r['n']} x {r['a']} x {r['c']}", r["threads"],
                                *(f"{r['seconds'][k] * 1e3:.1f}" for k in keys)]
                               for r in m["shapes"]], "lr" + "r" * len(keys))
        net = m["network"]
        lines += ["", f"MPI (2 ranks): ping-pong alpha {net['alpha'] * 1e6:.1f} us, "
                  f"{1 / net['beta'] / 1e9 if net['beta'] else float('inf'):.1f} GB/s; "
                  f"Allreduce alpha {net['allreduce']['alpha'] * 1e6:.1f} us, "
                  f"{1 / net['allreduce']['beta'] / 1e9 if net['allreduce']['beta'] else 0:.1f}"
                  " GB/s.", ""]
        lines += md_table(["model", "size", "P x T", "step ms", "floor ms", "step / floor",
                           *PARTS], [_run_row(run) for run in entry["runs"]],
                          "lllrrr" + "l" * len(PARTS))
        lines += ["", "Each part: measured ms / floor ms = ratio (a part with no floor: its "
                  "ms). `dense` is split into gemm .. python by the profiler's shares over "
                  "the profiled steps."]
        if entry.get("reasons"):
            lines += ["", "Parts above 2x:", ""] + [f"- {r}" for r in entry["reasons"]]
        lines.append("")
    return "\n".join(lines)


def _run_row(run: dict) -> list:
    """One run's cells: its step and floor, and each part as measured / floor = ratio."""
    fl, me = run["floors"], run["measured"]
    step = max(r["step"] for r in run["ranks"])
    total = sum(fl.values())
    cells = []
    for k in PARTS:
        if fl[k] > 0:
            cells.append(f"{me[k] * 1e3:.1f} / {fl[k] * 1e3:.2f} = {me[k] / fl[k]:.1f}x")
        else:
            cells.append(f"{me[k] * 1e3:.1f}" if me[k] >= 5e-5 else "0")
    s = run["size"]
    return [run["model"], f"n={run['n']}, nnz={run['nnz']}, f={s['features']}, "
            f"h={s['hidden']}, c={s['classes']}", f"{run['P']} x {run['threads']}",
            f"{step * 1e3:.1f}", f"{total * 1e3:.1f}", f"{step / total:.2f}", *cells]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", choices=["network", "train"], help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--model", default="gcn", help=argparse.SUPPRESS)
    ap.add_argument("--size", help=argparse.SUPPRESS)
    ap.add_argument("--label", default="after", help="the section this run writes")
    ap.add_argument("--note", default="", help="a line under the section's heading")
    ap.add_argument("--quick", action="store_true", help="small graphs, a smoke run")
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    ap.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--profiled", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--gemm-n", type=int, default=4096)
    ap.add_argument("--out", default=str(RESULTS / "floor.json"))
    ap.add_argument("--render", action="store_true",
                    help="only write the Markdown again from the JSON")
    ap.add_argument("--reuse-machine", metavar="LABEL",
                    help="take the machine rates from LABEL's run instead of measuring")
    ap.add_argument("--merge", action="store_true",
                    help="keep the label's other runs (replace only the ones run now)")
    args = ap.parse_args()
    if args.worker:
        if args.worker == "network":
            row = worker_network()
        else:
            row = worker_train(args)
        if row is not None:
            Path(args.result).write_text(json.dumps(row))
        return 0
    out = Path(args.out)
    if args.render:
        regenerate(out.with_suffix(""), render)
        return 0
    data = json.loads(out.read_text()) if out.exists() else dict(labels={})
    load = uptime()
    sizes = QUICK if args.quick else SIZES
    widths = sorted({v for s in args.sizes for v in (sizes[s]["hidden"], sizes[s]["classes"],
                                                     sizes[s]["features"])})
    previous = data["labels"].get(args.label, {})
    if args.reuse_machine:  # another label's machine rates (runs of several labels, paired)
        mach = data["labels"][args.reuse_machine]["machine"]
    else:
        print("machine floors ...", flush=True)
        mach = machine_floors(widths, 1024 if args.quick else args.gemm_n, args.repeat,
                              {k: sizes[k] for k in args.sizes})
        mach = json.loads(json.dumps(mach))  # int keys -> str, as read back
        mach["gemm_n"] = 1024 if args.quick else args.gemm_n
    runs = []
    for model in args.models:
        for name in args.sizes:
            for P, T in LAYOUTS:
                run = _launch(["--worker", "train", "--model", model, "--size",
                               json.dumps(sizes[name]), "--warmup", str(args.warmup),
                               "--epochs", str(args.epochs), "--profiled",
                               str(args.profiled)], P, T)
                run["floors"], run["measured"] = floors(run, mach), measured(run)
                runs.append(run)
                step = max(r["step"] for r in run["ranks"])
                print(f"{model} {name} P={P}x{T}: step {step * 1e3:.1f} ms, floor "
                      f"{sum(run['floors'].values()) * 1e3:.1f} ms; "
                      + ", ".join(f"{k} {run['measured'][k] * 1e3:.1f}/"
                                  f"{run['floors'][k] * 1e3:.2f}" for k in PARTS), flush=True)
    data["machine_info"] = machine()

    def key(r):
        return (r["model"], r["n"], r["P"], r["threads"])

    done = {key(r) for r in runs}
    kept = [r for r in previous.get("runs", []) if key(r) not in done] if args.merge else []
    data["labels"][args.label] = dict(when=time.strftime("%Y-%m-%d %H:%M"), uptime=load,
                                      note=args.note or previous.get("note", ""), machine=mach,
                                      runs=sorted(kept + runs, key=key),
                                      reasons=previous.get("reasons", []),
                                      quick=args.quick)
    # re-derive every run's floors from its label's machine rates
    for r in data["labels"][args.label]["runs"]:
        r["floors"], r["measured"] = floors(r, mach), measured(r)
    publish(out.with_suffix(""), data, render)
    print(f"wrote {out} and {out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
