"""spmmgnn on a GPU (issue 44): one command on a machine with one GPU and 16 cores.

    python -m bench.gpu                       # the full run (CUDA): under 5 minutes, target
    python -m bench.gpu --device cpu --quick  # the dry run CI can afford (a small graph)

(``python bench/gpu.py`` runs the same: this file imports nothing from the ``bench``
package, so it also runs by its path on a machine that has only this file.)

Steps, each printed as it finishes, then written to ``bench/results/gpu.{md,json}``
(``gpu-<device>-quick.*`` for ``--quick``):

1. the graph: CSBM (``spmmgnn.data.csbm``), 1M vertices, average degree 16 (about 17M
   non-zeros with the self loops of ``gcn_norm``), 128 features, 8 classes (``--quick``:
   20,000 vertices, 32 features);
2. ``pytest -m gpu`` (the device tests on CUDA; skipped by ``--quick`` unless ``--pytest``);
3. spmmgnn's own trainer on the device at P = 1 and P = 2 (``mpiexec``, both ranks on the
   one GPU; ``Trainer`` with ``TrainConfig(device=...)``, the code of ``spmmgnn train
   --device``): a 2-layer GCN, hidden 128, float32, Adam, no dropout or weight decay, with
   and without the first-layer cache; the steady training step (forward, loss, backward,
   the host-staged gradient all-reduce, Adam), its breakdown (``spmm_local``, ``exchange``,
   ``allreduce``, ``dense``, ``other``, as ``spmmgnn train`` reports it) and the losses
   (P = 2 must equal P = 1 loss by loss, rtol 1e-5). ``--quick`` also runs the trainer's
   numpy/numba path (``device=None``): its losses must equal the device path's;
4. tuned torch on the same device, one process: ``torch.sparse.mm`` with CSR of Â for the
   forward and of Âᵀ for the backward, the same model and step, both cache settings (its
   own initial weights: its losses are not compared with spmmgnn's);
5. the local product: ``op.matmul`` at P = 1 on the device against ``torch.sparse.mm`` of
   the same CSR, at f = 16 and 128 (best of ``--repeat``);
6. the best CPU layout: ``spmmgnn train`` on all cores (``nproc --all``; sparse2d on the
   near-square grid, one thread per rank), the same model without dropout.

Timings on CUDA synchronize the device around each step; the breakdown's multiply seconds
are launch-to-return times on CUDA (kernels run asynchronously until a host copy waits).
The machine needs mpi4py + an MPI for steps 3 and 5 (``bench/gpu/README.md``: how to set
up a lent GPU machine).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from spmmgnn.benchmark.harness import machine, mpiexec, write_json

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
FULL = dict(n=1_000_000, features=128, hidden=128, classes=8, epochs=12, repeat=10)
QUICK = dict(n=20_000, features=32, hidden=32, classes=8, epochs=6, repeat=3)


# ------------------------------------------------------------------ the model and step
def make_params(f_in: int, hidden: int, classes: int, device):
    """Two GCN layers' weights and biases, the same on every rank (seeded on the CPU)."""
    import torch

    g = torch.Generator().manual_seed(0)
    shapes = [(f_in, hidden), (hidden,), (hidden, classes), (classes,)]
    params = [(torch.randn(s, generator=g) * (1.0 / np.sqrt(s[0]) if len(s) == 2 else 0.0))
              for s in shapes]
    return [p.to(device).requires_grad_() for p in params]


def train(aggregate, x, labels, train_idx, n_train: int, params, epochs: int, cached: bool,
          sync, allreduce=None) -> dict:
    """``epochs`` full-batch steps of the 2-layer GCN; seconds of each step and the loss."""
    import torch

    w1, b1, w2, b2 = params
    opt = torch.optim.Adam(params, lr=0.01)
    ax = aggregate(x) if cached else None  # the constant first aggregation, once
    losses, seconds, reduce_seconds = [], [], []
    for _ in range(epochs):
        sync()
        t0 = time.perf_counter()
        h = ax @ w1 if cached else aggregate(x @ w1)
        h = torch.relu(h + b1)
        z = aggregate(h @ w2) + b2
        loss = torch.nn.functional.cross_entropy(z[train_idx], labels[train_idx],
                                                 reduction="sum") / n_train
        opt.zero_grad()
        loss.backward()
        t1 = time.perf_counter()
        total = allreduce(params, loss) if allreduce else float(loss.detach())
        reduce_seconds.append(time.perf_counter() - t1)
        opt.step()
        sync()
        seconds.append(time.perf_counter() - t0)
        losses.append(total)
    steady = seconds[1:] if len(seconds) > 1 else seconds
    return dict(losses=losses, step_seconds=float(np.mean(steady)),
                allreduce_seconds=float(np.mean(reduce_seconds[1:] or reduce_seconds)),
                first_step_seconds=seconds[0])


def syncer(device):
    from spmmgnn.backend.device import synchronizer

    return synchronizer(device)


# ------------------------------------------------------------------ data
def make_data(n: int, features: int, classes: int, where: Path) -> dict:
    """Generate the CSBM graph, normalize it, and save Â, X, labels and the train mask."""
    import scipy.sparse as sp

    from spmmgnn.data.csbm import csbm
    from spmmgnn.data.normalize import gcn_norm

    t0 = time.perf_counter()
    g = csbm(n=n, avg_degree=16.0, num_features=features, num_classes=classes, seed=0)
    A = gcn_norm(g.adj)
    sp.save_npz(where / "A.npz", A, compressed=False)
    sp.save_npz(where / "adj.npz", sp.csr_matrix(g.adj), compressed=False)  # the trainer's
    np.save(where / "X.npy", g.features.astype(np.float32))
    np.save(where / "y.npy", g.labels.astype(np.int64))
    np.save(where / "train.npy", g.masks["train"])
    return dict(n=n, nnz=int(A.nnz), features=features, classes=classes,
                seconds=time.perf_counter() - t0)


def load(where: Path):
    import scipy.sparse as sp

    return (sp.load_npz(where / "A.npz").tocsr(), np.load(where / "X.npy"),
            np.load(where / "y.npy"), np.load(where / "train.npy"))


# ------------------------------------------------------------------ the MPI worker
def worker(args) -> None:
    """Under mpiexec: ``spmmgnn``'s own trainer (``Trainer`` with ``device=``, the code of
    ``spmmgnn train --device``; ``none``: the numpy/numba path) on the saved graph, the
    2-layer GCN without dropout or weight decay, with and without the first-layer cache."""
    import scipy.sparse as sp
    import torch
    from mpi4py import MPI

    import spmmgnn
    from spmmgnn.data.graph import Graph
    from spmmgnn.training import TrainConfig, Trainer, distribute_graph

    comm = MPI.COMM_WORLD
    device = None if args.device == "none" else args.device
    where = Path(args.worker)
    graph = None
    if comm.rank == 0:
        _, X, y, train_mask = load(where)
        graph = Graph(adj=sp.load_npz(where / "adj.npz").tocsr(), features=X, labels=y,
                      masks=dict(train=train_mask), num_classes=int(y.max()) + 1, name="csbm")
    grid = spmmgnn.ProcessGrid(comm, device=device)
    data = distribute_graph(graph, grid, "gcn", algorithm="sparse1d")
    out = {}
    for cached in (False, True):
        data.op.reset_stats()
        config = TrainConfig(model="gcn", layers=2, hidden=args.hidden, dropout=0.0,
                             weight_decay=0.0, lr=0.01, epochs=args.epochs, eval_every=0,
                             progress=False, cache_input_aggregation=cached, device=device)
        got = Trainer(data, config).fit()
        s = data.op.comm_stats()
        steps = max(1, args.epochs)
        worst = comm.allreduce(got["epoch_seconds"], op=MPI.MAX)
        out["cached" if cached else "uncached"] = dict(
            losses=[r["loss"] for r in got["history"]], step_seconds=worst,
            first_step_seconds=got["first_epoch_seconds"], breakdown=got["breakdown"],
            bytes_per_step=dict(sent=s["bytes_sent"] / steps,
                                device_host=s["bytes_sent_by_tier"]["device_host"] / steps))
    if comm.size == 1 and device is not None:
        A = load(where)[0]
        dev = grid.device or torch.device("cpu")
        out["local_product"] = local_product(data.op, A, dev, args.repeat, syncer(grid.device))
    if comm.rank == 0:
        write_json(args.out, out)


def local_product(op, A, dev, repeat: int, sync) -> dict:
    """op.matmul at P = 1 against torch.sparse.mm of the same CSR (seconds, best of repeat)."""
    import torch

    from spmmgnn.backend.torch_backend import csr_tensor  # the CSR the torch backend uses

    a = csr_tensor(A.indptr, A.indices, A.data, A.shape, dev, torch.float32)
    out = {}
    for f in (16, 128):
        x = torch.randn(A.shape[1], f, device=dev)
        times = {}
        for name, fn in (("spmmgnn", lambda x=x: op.matmul(x)),
                         ("torch.sparse.mm", lambda x=x: torch.sparse.mm(a, x))):
            fn()
            best = float("inf")
            for _ in range(repeat):
                sync()
                t0 = time.perf_counter()
                fn()
                sync()
                best = min(best, time.perf_counter() - t0)
            times[name] = best
        times["ratio"] = times["spmmgnn"] / times["torch.sparse.mm"]
        times["gflops"] = 2 * A.nnz * f / times["torch.sparse.mm"] / 1e9
        out[f"f={f}"] = times
    return out


# ------------------------------------------------------------------ tuned torch
def tuned_torch(where: Path, device: str, hidden: int, epochs: int) -> dict:
    """One process: torch.sparse.mm with CSR of Â (forward) and Âᵀ (backward)."""
    import torch

    A, X, y, train_mask = load(where)
    dev = torch.device(device)

    from spmmgnn.backend.torch_backend import csr_tensor  # int32 indices, as tuned as it gets

    At = A.T.tocsr()
    a = csr_tensor(A.indptr, A.indices, A.data, A.shape, dev, torch.float32)
    at = csr_tensor(At.indptr, At.indices, At.data, At.shape, dev, torch.float32)

    class Aggregate(torch.autograd.Function):
        @staticmethod
        def forward(ctx, h):
            return torch.sparse.mm(a, h)

        @staticmethod
        def backward(ctx, g):
            return torch.sparse.mm(at, g.contiguous())

    x = torch.from_numpy(X).to(dev)
    labels = torch.from_numpy(y).to(dev)
    train_idx = torch.from_numpy(np.flatnonzero(train_mask)).to(dev)
    out = {}
    for cached in (False, True):
        params = make_params(X.shape[1], hidden, int(y.max()) + 1, dev)
        out["cached" if cached else "uncached"] = train(
            Aggregate.apply, x, labels, train_idx, int(train_mask.sum()), params, epochs,
            cached, syncer(dev))
    return out


# ------------------------------------------------------------------ the driver
def run(cmd: list[str], timeout: float) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=ROOT)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return proc


def spmmgnn_run(where: Path, P: int, device: str, cfg: dict, timeout: float) -> dict:
    out = where / f"run-{device}-{P}.json"
    threads = max(1, (os.cpu_count() or 1) // P)
    env_threads = ["env", f"SPMMGNN_THREADS={threads}", f"OMP_NUM_THREADS={threads}"]
    run([mpiexec(), "-n", str(P), *env_threads, sys.executable, __file__, "--worker",
         str(where), "--device", device, "--out", str(out), "--hidden", str(cfg["hidden"]),
         "--epochs", str(cfg["epochs"]), "--repeat", str(cfg["repeat"])], timeout)
    return json.loads(out.read_text())


def best_cpu(cfg: dict, quick: bool, where: Path, timeout: float) -> dict:
    """``spmmgnn train`` on all cores: sparse2d on the near-square grid, 1 thread a rank."""
    from spmmgnn.grid import format_shape, near_square

    P = 2 if quick else min(16, os.cpu_count() or 1)
    shape = near_square(P, 2)
    out = where / "cpu.json"
    run([mpiexec(), "-n", str(P), sys.executable, "-m", "spmmgnn.cli", "train", "--quiet",
         "--csbm-n", str(cfg["n"]), "--csbm-degree", "16", "--csbm-features",
         str(cfg["features"]), "--csbm-classes", str(cfg["classes"]), "--hidden",
         str(cfg["hidden"]), "--layers", "2", "--dropout", "0", "--no-cache", "--epochs",
         str(cfg["epochs"]), "--eval-every", str(cfg["epochs"]), "--algorithm", "sparse2d",
         "--grid", format_shape(shape), "--threads", "1", "--json", str(out)], timeout)
    got = json.loads(out.read_text())
    return dict(P=P, layout=f"sparse2d {format_shape(shape)}",
                step_seconds=got["epoch_seconds"], breakdown=got["breakdown"])


def pytest_gpu(quick: bool, forced: bool, log: Path) -> str:
    """``pytest -m gpu``'s summary line; its whole output goes to ``log``."""
    if quick and not forced:
        return "skipped (--quick; pass --pytest to run it)"
    try:
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rfE", "-m", "gpu",
                               "tests"], capture_output=True, text=True, cwd=ROOT, timeout=240)
    except subprocess.TimeoutExpired:
        return "timed out after 240 s"
    from spmmgnn.runtime.atomic import write_text_atomic

    write_text_atomic(log, proc.stdout + proc.stderr)
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    return (lines[-1] if lines else "no output") + f" (exit {proc.returncode})"


def rel_diff(a: list[float], b: list[float]) -> float:
    a, b = np.asarray(a), np.asarray(b)
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-30)))


def report(res: dict) -> str:
    ms = lambda s: f"{1000 * s:.2f}"  # noqa: E731
    lines = [f"# spmmgnn on {res['device_name']} ({'quick dry run' if res['quick'] else 'full'})",
             "", f"Command: `{res['command']}`; {res['cores']} cores (`nproc --all`); "
             f"graph: CSBM n={res['data']['n']:,}, nnz={res['data']['nnz']:,}, "
             f"f={res['data']['features']}, hidden={res['hidden']}, float32, 2-layer GCN.",
             f"`pytest -m gpu`: {res['pytest']}", "",
             "| what | ms per step, no cache | ms per step, first-layer cache |",
             "|---|---|---|"]
    for name, r in res["steps"].items():
        lines.append(f"| {name} | {ms(r['uncached']['step_seconds'])} | "
                     f"{ms(r['cached']['step_seconds'])} |")
    cpu = res.get("best_cpu")
    if cpu:
        lines.append(f"| spmmgnn CPU, best layout ({cpu['layout']}, P = {cpu['P']}) | "
                     f"{ms(cpu['step_seconds'])} | - |")
    lines += ["", "Ratios (targets on one H100/H200: P = 1 ≤ 1.3× tuned torch, local product ≤ "
              "1.1× torch.sparse.mm, P = 2 losses = P = 1 losses to rtol 1e-5):", ""]
    for key, v in res["checks"].items():
        lines.append(f"- {key}: {v:.4g}")
    if res.get("local_product"):
        lines += ["", "| local product | spmmgnn ms | torch.sparse.mm ms | ratio | "
                  "GFLOP/s (torch) |", "|---|---|---|---|---|"]
        for f, t in res["local_product"].items():
            lines.append(f"| {f} | {ms(t['spmmgnn'])} | {ms(t['torch.sparse.mm'])} | "
                         f"{t['ratio']:.3f} | {t['gflops']:.1f} |")
    lines += ["", "Breakdown per step of spmmgnn's trainer (rank 0, no cache; `spmmgnn train`'s "
              "breakdown: the gradient all-reduce staged through the host is in allreduce):",
              ""]
    for name, r in res.get("spmmgnn", {}).items():
        b = r["uncached"]["breakdown"]
        lines.append(f"- {name}: " + ", ".join(f"{k} {v * 1000:.2f} ms" for k, v in b.items()))
    if res.get("errors"):
        lines += ["", "Steps that failed (the others still ran):", ""]
        lines += [f"- {k}: `{v.splitlines()[0] if v else ''}`" for k, v in res["errors"].items()]
    return "\n".join(lines) + "\n"


def _load(avg) -> str:
    return ", ".join(f"{v:.1f}" for v in avg)


def render(res: dict) -> str:
    """The Markdown of a finished run (``report`` and how long it took, at what load)."""
    return report(res) + (f"\nThe whole command took {res['seconds']:.0f} s; load average "
                          f"(1, 5, 15 min) {_load(res['load_start'])} at the start, "
                          f"{_load(res['load_end'])} at the end.\n")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    p.add_argument("--quick", action="store_true", help="a small graph (the CI dry run)")
    p.add_argument("--pytest", action="store_true", help="run pytest -m gpu also with --quick")
    p.add_argument("--n", type=int, help="vertices (default 1M, 20,000 with --quick)")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--out", help="JSON path (default bench/results/gpu[-DEVICE-quick].json)")
    p.add_argument("--hidden", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--epochs", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--repeat", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    cfg = dict(QUICK if args.quick else FULL)
    if args.worker:
        worker(args)
        return 0
    if args.n:
        cfg["n"] = args.n
    for k in ("hidden", "epochs", "repeat"):
        cfg[k] = getattr(args, k) or cfg[k]
    import torch

    t_start = time.perf_counter()
    name = "gpu" if not args.quick else f"gpu-{args.device}-quick"
    out = Path(args.out) if args.out else RESULTS / f"{name}.json"
    device_name = (torch.cuda.get_device_name(0) if args.device.startswith("cuda")
                   and torch.cuda.is_available() else f"{args.device} (no GPU)")
    timeout = 600
    res = dict(command="python -m bench.gpu " + " ".join(sys.argv[1:] if argv is None else argv),
               quick=args.quick, device=args.device, device_name=device_name,
               cores=os.cpu_count(), machine=machine(), torch=torch.__version__,
               hidden=cfg["hidden"], epochs=cfg["epochs"], load_start=os.getloadavg())
    errors = res["errors"] = {}

    def step(name: str, fn):
        """Run one step; a failure is recorded and the later steps still run (a device
        session is short: one broken step must not cost the others' numbers)."""
        t0 = time.perf_counter()
        try:
            got = fn()
        except Exception as exc:  # noqa: BLE001 - recorded, printed and reported
            errors[name] = f"{type(exc).__name__}: {str(exc)[-2000:]}"
            print(f"{name}: FAILED after {time.perf_counter() - t0:.0f} s\n{errors[name]}",
                  flush=True)
            got = None
        else:
            print(f"{name}: done in {time.perf_counter() - t0:.0f} s", flush=True)
        write_json(out, res)  # what has finished so far survives a later crash or kill
        return got

    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        res["data"] = make_data(cfg["n"], cfg["features"], cfg["classes"], where)
        print(f"graph: {res['data']}", flush=True)
        res["pytest"] = pytest_gpu(args.quick, args.pytest, out.with_suffix(".pytest.log"))
        print(f"pytest -m gpu: {res['pytest']}", flush=True)
        runs = {}
        for P in (1, 2):
            got = step(f"spmmgnn --device {args.device}, P = {P}",
                       lambda P=P: spmmgnn_run(where, P, args.device, cfg, timeout))
            if got is not None:
                runs[P] = res.setdefault("spmmgnn", {})[
                    f"spmmgnn --device {args.device}, P = {P}"] = got
        if 1 in runs:
            res["local_product"] = runs[1].pop("local_product", None)
        res["tuned_torch"] = step("tuned torch", lambda: tuned_torch(
            where, args.device, cfg["hidden"], cfg["epochs"]))
        res["steps"] = dict(res.get("spmmgnn", {}))
        if res["tuned_torch"] is not None:
            res["steps"][f"tuned torch ({args.device}, torch.sparse.mm, CSR of Â and Âᵀ)"] \
                = res["tuned_torch"]
        checks = res["checks"] = {}
        torch_run = res["tuned_torch"]
        if 1 in runs and torch_run is not None:
            for key, label in (("uncached", "no cache"), ("cached", "cache")):
                checks[f"P = 1 / tuned torch, {label}"] = (
                    runs[1][key]["step_seconds"] / torch_run[key]["step_seconds"])
        if 1 in runs and 2 in runs:
            checks["P = 2 vs P = 1 losses, max relative difference"] = max(
                rel_diff(runs[2][k]["losses"], runs[1][k]["losses"])
                for k in ("uncached", "cached"))
        if args.quick:  # the numpy/numba path through the same step: the same losses
            for P in (1, 2):
                ref = step(f"numpy path, P = {P}",
                           lambda P=P: spmmgnn_run(where, P, "none", cfg, timeout))
                if ref is not None and P in runs:
                    checks[f"device vs numpy path losses, P = {P}"] = max(
                        rel_diff(runs[P][k]["losses"], ref[k]["losses"])
                        for k in ("uncached", "cached"))
        res["best_cpu"] = step("best CPU layout", lambda: best_cpu(cfg, args.quick, where,
                                                                    timeout))
    res["seconds"] = time.perf_counter() - t_start
    res["load_end"] = os.getloadavg()
    text = render(res)
    write_json(out, res)
    from spmmgnn.runtime.atomic import write_text_atomic

    write_text_atomic(out.with_suffix(".md"), text)
    print(text)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
