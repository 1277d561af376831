"""spmmgnn on a GPU: what ``spmmgnn train --device cuda`` gives a user, against tuned torch.

    python -m bench.gpu                       # the full run (CUDA): under 6 minutes, target
    python -m bench.gpu --device cpu --quick  # the dry run CI can afford (small graphs)

(from the project's root: the workers it starts run ``python -m bench.gpu`` there too).

Steps, each printed as it finishes, then written to ``bench/results/gpu.{md,json}``
(``gpu-<device>-quick.*`` for ``--quick``):

1. per graph size (CSBM, average degree 16, 128 features, 10 classes: 1M and 4M vertices;
   ``--quick``: 20,000 and 40,000 vertices, 32 features), the graph saved once;
2. spmmgnn's own trainer on the device at P = 1 (``Trainer`` with ``TrainConfig(device=...)``,
   the code of ``spmmgnn train --device``) with the CLI's default model: a 2-layer GCN,
   hidden 128, dropout 0.5, Adam with weight decay 5e-4, float32, with and without the
   first-layer cache: the steady training step, its breakdown, the peak device memory
   (``torch.cuda.max_memory_allocated`` of set-up and training; on the CPU every storage
   torch allocates, ``backend.peak.PeakTracker``) and the device-memory model's prediction
   (``training.device_peak``); bias + ReLU + dropout is the fused pass (``backend.fused``:
   Triton kernels on CUDA, their torch twin on the CPU);
3. tuned torch on the same device, one process: ``torch.sparse.mm`` with CSR of Â for the
   forward and of Âᵀ for the backward, the same model with ``F.dropout``,
   ``torch.optim.Adam(weight_decay=5e-4)``, both cache settings, its step and peak memory;
4. the largest CSBM graph each fits in ``--cap-gib`` of device memory (a bisection on the
   vertices from the per-vertex bytes of step 2 and 3, each trial a fresh process training
   two steps, bounded by ``--search-seconds``);
5. with ``--extras`` (always with ``--quick``) at the first size: P = 2 (``mpiexec``, both
   ranks on the one device; its losses equal P = 1's), the local product against
   ``torch.sparse.mm``, the numpy/numba path's losses with dropout 0 (equal to the device
   path's then: the two draw different dropout masks), and the best CPU layout
   (``spmmgnn train`` on all cores);
6. with ``--pytest``: ``pytest -m gpu`` (``bench/gpu_check.sh`` runs it before this script).

Timings on CUDA synchronize the device around each step. The machine needs mpi4py + an MPI
for the P = 2 and CPU steps (see ``bench/gpu-machine/README.md``).
"""

from __future__ import annotations

import argparse
import gc
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
FULL = dict(sizes=[1_000_000, 4_000_000], features=128, hidden=128, classes=10, epochs=12,
            repeat=10, cap_gib=8.0, search_seconds=120)
QUICK = dict(sizes=[20_000, 40_000], features=32, hidden=32, classes=10, epochs=6, repeat=3,
             cap_gib=0.03, search_seconds=240)
DROPOUT, WEIGHT_DECAY, LR = 0.5, 5e-4, 0.01  # spmmgnn train's defaults
GIB = 2**30
SELF = [sys.executable, "-m", "bench.gpu"]  # this script in a worker (cwd: the root)


# ------------------------------------------------------------------ peak device memory
class Peak:
    """The peak device memory of a block: on CUDA ``max_memory_allocated`` above what was
    allocated at its start; elsewhere ``PeakTracker``'s (every storage torch creates)."""

    def __init__(self, device):
        import torch

        self.cuda = torch.device(device).type == "cuda" if device else False
        self.bytes = 0

    def __enter__(self):
        import torch

        if self.cuda:
            gc.collect()
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            self.base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        else:
            from spmmgnn.backend.peak import PeakTracker

            self.tracker = PeakTracker().__enter__()
        return self

    def __exit__(self, *exc):
        import torch

        if self.cuda:
            torch.cuda.synchronize()
            self.bytes = int(torch.cuda.max_memory_allocated() - self.base)
        else:
            self.tracker.__exit__(*exc)
            self.bytes = int(self.tracker.peak)
        return False


# ------------------------------------------------------------------ the tuned-torch model
def make_params(f_in: int, hidden: int, classes: int, device):
    """Two GCN layers' weights and biases, the same on every rank (seeded on the CPU)."""
    import torch

    g = torch.Generator().manual_seed(0)
    shapes = [(f_in, hidden), (hidden,), (hidden, classes), (classes,)]
    params = [(torch.randn(s, generator=g) * (1.0 / np.sqrt(s[0]) if len(s) == 2 else 0.0))
              for s in shapes]
    return [p.to(device).requires_grad_() for p in params]


def train(aggregate, x, labels, train_idx, n_train: int, params, epochs: int, cached: bool,
          sync) -> dict:
    """``epochs`` full-batch steps of the 2-layer GCN with dropout 0.5 and Adam with weight
    decay (torch's own): seconds of each step and the loss."""
    import torch
    import torch.nn.functional as F

    w1, b1, w2, b2 = params
    opt = torch.optim.Adam(params, lr=LR, weight_decay=WEIGHT_DECAY)
    ax = aggregate(x) if cached else None  # the constant first aggregation, once
    losses, seconds = [], []
    for _ in range(epochs):
        sync()
        t0 = time.perf_counter()
        h = ax @ w1 if cached else aggregate(x @ w1)
        h = F.dropout(torch.relu(h + b1), DROPOUT, training=True)
        z = aggregate(h @ w2) + b2
        loss = F.cross_entropy(z[train_idx], labels[train_idx], reduction="sum") / n_train
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        sync()
        seconds.append(time.perf_counter() - t0)
    steady = seconds[1:] if len(seconds) > 1 else seconds
    return dict(losses=losses, step_seconds=float(np.mean(steady)),
                first_step_seconds=seconds[0])


def syncer(device):
    from spmmgnn.backend.device import synchronizer

    return synchronizer(device)


def csr_of(A, dev):
    """``A`` as the torch backend's float32 CSR on ``dev`` (int32 indices)."""
    import torch

    from spmmgnn.backend.torch_backend import csr_tensor

    return csr_tensor(A.indptr, A.indices, A.data, A.shape, dev, torch.float32)


# ------------------------------------------------------------------ data
def make_data(n: int, features: int, classes: int, where: Path) -> dict:
    """Generate the CSBM graph, normalize it, and save Â, the adjacency, X, labels and the
    train mask under ``where``."""
    import scipy.sparse as sp

    from spmmgnn.data.csbm import csbm
    from spmmgnn.data.normalize import gcn_norm

    where.mkdir(parents=True, exist_ok=True)
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


def local_graph(where: Path, grid):
    """The saved graph distributed on ``grid`` (rank 0 reads it)."""
    import scipy.sparse as sp

    from spmmgnn.data.graph import Graph
    from spmmgnn.training import distribute_graph

    graph = None
    if grid.comm.rank == 0:
        _, X, y, train_mask = load(where)
        graph = Graph(adj=sp.load_npz(where / "adj.npz").tocsr(), features=X, labels=y,
                      masks=dict(train=train_mask), num_classes=int(y.max()) + 1, name="csbm")
    return distribute_graph(graph, grid, "gcn", algorithm="sparse1d")


# ------------------------------------------------------------------ spmmgnn (MPI worker)
def worker(args) -> None:
    """Under mpiexec: ``spmmgnn``'s own trainer (``Trainer`` with ``device=``, the code of
    ``spmmgnn train --device``; ``none``: the numpy/numba path) on the saved graph with the
    CLI's default model (``--dropout``), with and without the first-layer cache: the peak
    device memory and the model's prediction of it."""
    import torch
    from mpi4py import MPI

    import spmmgnn
    from spmmgnn.training import TrainConfig, Trainer
    from spmmgnn.training.device_peak import device_need

    comm = MPI.COMM_WORLD
    device = None if args.device == "none" else args.device
    grid = spmmgnn.ProcessGrid(comm, device=device)
    data = local_graph(Path(args.worker), grid)
    out = {}
    for cached in (False, True):
        data.op.reset_stats()
        config = TrainConfig(model="gcn", layers=2, hidden=args.hidden, dropout=args.dropout,
                             weight_decay=WEIGHT_DECAY, lr=LR, epochs=args.epochs,
                             eval_every=0, progress=False, cache_input_aggregation=cached,
                             device=device)
        with Peak(device) as peak:
            trainer = Trainer(data, config)
            got = trainer.fit()
        s = data.op.comm_stats()
        steps = max(1, args.epochs)
        worst = comm.allreduce(got["epoch_seconds"], op=MPI.MAX)
        row = dict(losses=[r["loss"] for r in got["history"]], step_seconds=worst,
                   first_step_seconds=got["first_epoch_seconds"],
                   breakdown=got["breakdown"], peak_bytes=comm.allreduce(peak.bytes,
                                                                         op=MPI.MAX),
                   bytes_per_step=dict(sent=s["bytes_sent"] / steps,
                                       device_host=s["bytes_sent_by_tier"]["device_host"]
                                       / steps))
        if device is not None:
            step = trainer._device_step()
            split_rows = sum(int(m.sum()) for m in trainer.data.masks.values())
            need = device_need(data.op, step, split_rows, grid.device.type)
            row["predicted_bytes"] = comm.allreduce(need.total, op=MPI.MAX)
            row["predicted_at"] = need.where
            row["dropout_impl"] = step.impl
        out["cached" if cached else "uncached"] = row
        del trainer
        gc.collect()
        if device is not None and grid.device.type == "cuda":
            torch.cuda.empty_cache()
    if comm.size == 1 and device is not None and args.repeat:
        A = load(Path(args.worker))[0]
        dev = grid.device or torch.device("cpu")
        out["local_product"] = local_product(data.op, A, dev, args.repeat, syncer(grid.device))
    if comm.rank == 0:
        write_json(args.out, out)


def local_product(op, A, dev, repeat: int, sync) -> dict:
    """op.matmul at P = 1 against torch.sparse.mm of the same CSR (seconds, best of repeat)."""
    import torch

    a = csr_of(A, dev)  # the CSR the torch backend multiplies
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
def torch_worker(args) -> None:
    """One process: torch.sparse.mm with CSR of Â (forward) and Âᵀ (backward), the same
    model with dropout and weight decay, both cache settings; the step and the peak device
    memory of loading and training (a fresh process per call: its own allocator)."""
    import torch

    where, dev = Path(args.torch_worker), torch.device(args.device)
    A, X, y, train_mask = load(where)
    out = {}
    for cached in (False, True):
        with Peak(dev) as peak:
            a, at = csr_of(A, dev), csr_of(A.T.tocsr(), dev)

            class Aggregate(torch.autograd.Function):
                @staticmethod
                def forward(ctx, h, a=a):
                    return torch.sparse.mm(a, h)

                @staticmethod
                def backward(ctx, g, at=at):
                    return torch.sparse.mm(at, g.contiguous()), None

            x = torch.from_numpy(X).to(dev)
            labels = torch.from_numpy(y).to(dev)
            train_idx = torch.from_numpy(np.flatnonzero(train_mask)).to(dev)
            params = make_params(X.shape[1], args.hidden, int(y.max()) + 1, dev)
            got = train(Aggregate.apply, x, labels, train_idx, int(train_mask.sum()), params,
                        args.epochs, cached, syncer(dev))
            del a, at, x, labels, train_idx, params
        got["peak_bytes"] = peak.bytes
        out["cached" if cached else "uncached"] = got
    write_json(args.out, out)


# ------------------------------------------------------------------ the largest graph
def fit_trial(args) -> None:
    """Train two steps on a fresh CSBM graph of ``--n`` vertices (``--fit-trial``: torch
    or spmmgnn) and write its peak device memory (0 and the error when it
    ran out)."""
    import torch

    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        make_data(args.n, args.features, args.classes, where)
        out = where / "trial.json"
        try:
            if args.fit_trial == "torch":
                args.torch_worker, args.out, args.epochs = str(where), str(out), 2
                torch_worker(args)
                got = json.loads(out.read_text())
                peak = max(r["peak_bytes"] for r in got.values())
            else:
                args.worker, args.out, args.epochs, args.repeat = str(where), str(out), 2, 0
                worker(args)
                got = json.loads(out.read_text())
                peak = max(r["peak_bytes"] for r in got.values())
            result = dict(n=args.n, peak_bytes=peak)
        except torch.OutOfMemoryError as exc:
            result = dict(n=args.n, peak_bytes=0, error=str(exc)[:300])
    write_json(args.trial_out, result)


def largest_graph(kind: str, cap: float, per_vertex: float, cfg: dict, device: str,
                  seconds: float, timeout: float) -> dict:
    """The largest CSBM graph ``kind`` trains in ``cap`` bytes: a bisection on the vertices
    between 0.85x and 1.15x the guess ``cap / per_vertex`` (lower while the low end does not
    fit), each trial a fresh process, while ``seconds`` last."""
    guess = int(cap / per_vertex)
    lo, hi, trials = int(0.85 * guess), int(1.15 * guess), []
    fits_lo = None
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        while time.perf_counter() - t0 < seconds and hi - lo > max(1000, 0.02 * guess):
            n = (lo + hi) // 2 if fits_lo else lo
            path = Path(tmp) / f"{kind}-{n}.json"
            run([*SELF, "--fit-trial", kind, "--n", str(n), "--device",
                 device, "--features", str(cfg["features"]), "--classes", str(cfg["classes"]),
                 "--hidden", str(cfg["hidden"]), "--trial-out", str(path)], timeout)
            got = json.loads(path.read_text())
            ok = 0 < got["peak_bytes"] <= cap
            trials.append(dict(n=n, peak_gib=got["peak_bytes"] / GIB, fits=ok))
            if fits_lo is None and not ok:  # the guess was high: bracket lower
                lo, hi = int(0.85 * lo), lo
                continue
            fits_lo = True
            lo, hi = (n, hi) if ok else (lo, n)
    best = max([t["n"] for t in trials if t["fits"]], default=0)
    return dict(kind=kind, cap_gib=cap / GIB, largest_n=best, trials=trials,
                seconds=time.perf_counter() - t0)


def run(cmd: list[str], timeout: float) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=ROOT)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return proc


def spmmgnn_run(where: Path, P: int, device: str, cfg: dict, timeout: float,
                repeat: int = 0, dropout: float = DROPOUT) -> dict:
    out = where / f"run-{device}-{P}-{dropout}.json"
    threads = max(1, (os.cpu_count() or 1) // P)
    env_threads = ["env", f"SPMMGNN_THREADS={threads}", f"OMP_NUM_THREADS={threads}"]
    run([mpiexec(), "-n", str(P), *env_threads, *SELF, "--worker",
         str(where), "--device", device, "--out", str(out), "--hidden", str(cfg["hidden"]),
         "--epochs", str(cfg["epochs"]), "--repeat", str(repeat), "--dropout", str(dropout)],
        timeout)
    return json.loads(out.read_text())


def torch_run(where: Path, device: str, cfg: dict, timeout: float) -> dict:
    out = where / f"torch-{device}.json"
    run([*SELF, "--torch-worker", str(where), "--device", device, "--out",
         str(out), "--hidden", str(cfg["hidden"]), "--epochs", str(cfg["epochs"])], timeout)
    return json.loads(out.read_text())


def best_cpu(cfg: dict, n: int, quick: bool, where: Path, timeout: float) -> dict:
    """``spmmgnn train`` on all cores: sparse2d on the near-square grid, 1 thread a rank."""
    from spmmgnn.grid import format_shape, near_square

    P = 2 if quick else min(16, os.cpu_count() or 1)
    shape = near_square(P, 2)
    out = where / "cpu.json"
    run([mpiexec(), "-n", str(P), sys.executable, "-m", "spmmgnn.cli", "train", "--quiet",
         "--csbm-n", str(n), "--csbm-degree", "16", "--csbm-features",
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


def _ms(seconds: float) -> str:
    return f"{1000 * seconds:.2f}"


def _gib(nbytes: float) -> str:
    return f"{nbytes / GIB:.3f}" if nbytes < GIB else f"{nbytes / GIB:.2f}"


def report(res: dict) -> str:
    lines = [f"# spmmgnn on {res['device_name']} ({'quick dry run' if res['quick'] else 'full'})",
             "", f"Command: `{res['command']}`; {res['cores']} cores (`nproc --all`); "
             f"CSBM graphs (degree 16, {res['features']} features, {res['classes']} classes), "
             f"2-layer GCN, hidden {res['hidden']}, float32, dropout {DROPOUT}, Adam with "
             f"weight decay {WEIGHT_DECAY} (`spmmgnn train`'s defaults), {res['epochs']} "
             "epochs (the first not timed). Peak memory: "
             + ("`torch.cuda.max_memory_allocated` of set-up and training, GiB."
                if res["device"].startswith("cuda") else
                "every storage torch created during set-up and training "
                "(`backend.peak.PeakTracker`; the CPU has no device allocator), GiB; the "
                "model counts X and the other tensors the CPU device shares with the host, "
                "which the tracker does not see, so its column is above 1 here."),
             f"`pytest -m gpu`: {res.get('pytest', 'not run')}", "",
             "| graph | run | ms per step, no cache / cache | ratio to tuned torch | "
             "peak GiB, no cache / cache | ratio to tuned torch | model / measured peak |",
             "|---|---|---|---|---|---|---|"]
    for size in res["sizes"]:
        got = res["graphs"].get(str(size), {})
        anchor = got.get("tuned_torch")
        graph = f"{size:,} vertices, {got.get('data', {}).get('nnz', 0):,} nnz"
        rows = [("tuned torch", anchor), ("spmmgnn train --device", got.get("spmmgnn"))]
        for label, r in rows:
            if not r or any(k not in r for k in ("uncached", "cached")):
                continue
            a, b = r["uncached"], r["cached"]
            ratio = mem = model = "-"
            if anchor and r is not anchor:
                ratio = " / ".join(f"{x['step_seconds'] / y['step_seconds']:.2f}"
                                   for x, y in ((a, anchor["uncached"]),
                                                (b, anchor["cached"])))
                mem = " / ".join(f"{x['peak_bytes'] / max(1, y['peak_bytes']):.2f}"
                                 for x, y in ((a, anchor["uncached"]),
                                              (b, anchor["cached"])))
            if "predicted_bytes" in a:
                model = " / ".join(f"{x['predicted_bytes'] / max(1, x['peak_bytes']):.3f}"
                                   for x in (a, b))
            lines.append(f"| {graph} | {label} | {_ms(a['step_seconds'])} / "
                         f"{_ms(b['step_seconds'])} | {ratio} | {_gib(a['peak_bytes'])} / "
                         f"{_gib(b['peak_bytes'])} | {mem} | {model} |")
    if res.get("largest"):
        lines += ["", f"Largest CSBM graph trained in {res['cap_gib']:g} GiB of device memory "
                  "(bisection on the vertices, each trial a fresh process training two steps; "
                  "no cache):", "", "| run | largest vertices | vs tuned torch | trials |",
                  "|---|---|---|---|"]
        torch_n = res["largest"].get("torch", {}).get("largest_n", 0)
        for kind, r in res["largest"].items():
            vs = f"{r['largest_n'] / torch_n:.2f}x" if torch_n and kind != "torch" else "-"
            trials = ", ".join(f"{t['n']:,}: {t['peak_gib']:.2f} GiB"
                               f"{'' if t['fits'] else ' (over)'}" for t in r["trials"])
            lines.append(f"| {kind} | {r['largest_n']:,} | {vs} | {trials} |")
    extras = res.get("extras")
    if extras:
        lines += ["", "Extras at the first size:", ""]
        for key, v in extras.get("checks", {}).items():
            lines.append(f"- {key}: {v:.4g}")
        for f, t in (extras.get("local_product") or {}).items():
            lines.append(f"- local product {f}: spmmgnn {_ms(t['spmmgnn'])} ms, "
                         f"torch.sparse.mm {_ms(t['torch.sparse.mm'])} ms, ratio "
                         f"{t['ratio']:.3f}")
        cpu = extras.get("best_cpu")
        if cpu:
            lines.append(f"- spmmgnn CPU, best layout ({cpu['layout']}, P = {cpu['P']}): "
                         f"{_ms(cpu['step_seconds'])} ms per step (no dropout, no cache)")
        if extras.get("P2"):
            lines.append(f"- spmmgnn --device {res['device']}, P = 2: "
                         + " / ".join(_ms(extras["P2"][k]["step_seconds"])
                                      for k in ("uncached", "cached"))
                         + " ms per step (no cache / cache)")
    if res.get("errors"):
        lines += ["", "Steps that failed (the others still ran):", ""]
        lines += [f"- {k}: `{v.splitlines()[0] if v else ''}`" for k, v in res["errors"].items()]
    return "\n".join(lines) + "\n"


def _load(avg) -> str:
    return ", ".join(f"{v:.1f}" for v in avg)


def per_vertex(res: dict, sizes: list[int], pick) -> float | None:
    """Bytes per vertex between the two graphs' peaks (``pick`` reads a size's peak)."""
    peaks = [pick(res["graphs"].get(str(n), {})) for n in sizes]
    if len(sizes) < 2 or any(not p for p in peaks):
        return None
    return max(1.0, (peaks[-1] - peaks[0]) / (sizes[-1] - sizes[0]))


def render(res: dict) -> str:
    """The Markdown of a finished run (``report`` and how long it took, at what load)."""
    return report(res) + (f"\nThe whole command took {res['seconds']:.0f} s; load average "
                          f"(1, 5, 15 min) {_load(res['load_start'])} at the start, "
                          f"{_load(res['load_end'])} at the end.\n")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    p.add_argument("--quick", action="store_true", help="small graphs (the CI dry run)")
    p.add_argument("--pytest", action="store_true", help="also run pytest -m gpu")
    p.add_argument("--extras", action="store_true",
                   help="P = 2, the local product, the numpy path, the best CPU layout")
    p.add_argument("--sizes", type=int, nargs="+", help="graph sizes (vertices)")
    p.add_argument("--cap-gib", type=float, help="device memory of the largest-graph search")
    p.add_argument("--search-seconds", type=float, help="time for the search (0: none)")
    p.add_argument("--out", help="JSON path (default bench/results/gpu[-DEVICE-quick].json)")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--torch-worker", help=argparse.SUPPRESS)
    p.add_argument("--fit-trial", help=argparse.SUPPRESS)
    p.add_argument("--trial-out", help=argparse.SUPPRESS)
    p.add_argument("--dropout", type=float, default=DROPOUT, help=argparse.SUPPRESS)
    p.add_argument("--n", type=int, help=argparse.SUPPRESS)
    p.add_argument("--features", type=int, help=argparse.SUPPRESS)
    p.add_argument("--classes", type=int, help=argparse.SUPPRESS)
    p.add_argument("--hidden", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--epochs", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--repeat", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    cfg = dict(QUICK if args.quick else FULL)
    for k in ("hidden", "epochs", "repeat", "features", "classes"):
        if getattr(args, k, None) is None:
            setattr(args, k, cfg[k])
    if args.worker:
        worker(args)
        return 0
    if args.torch_worker:
        torch_worker(args)
        return 0
    if args.fit_trial:
        fit_trial(args)
        return 0
    cfg.update({k: v for k, v in (("sizes", args.sizes), ("cap_gib", args.cap_gib),
                                  ("search_seconds", args.search_seconds)) if v is not None})
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
               sizes=cfg["sizes"], features=cfg["features"], classes=cfg["classes"],
               hidden=cfg["hidden"], epochs=cfg["epochs"], cap_gib=cfg["cap_gib"],
               load_start=os.getloadavg(), graphs={})
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

    if args.pytest:
        res["pytest"] = pytest_gpu(False, True, out.with_suffix(".pytest.log"))
        print(f"pytest -m gpu: {res['pytest']}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for i, n in enumerate(cfg["sizes"]):
            where = Path(tmp) / f"n{n}"
            got = res["graphs"][str(n)] = {}
            got["data"] = step(f"graph n={n:,}", lambda n=n, where=where: make_data(
                n, cfg["features"], cfg["classes"], where))
            if got["data"] is None:
                continue
            got["spmmgnn"] = step(f"spmmgnn --device {args.device}, n={n:,}",
                                  lambda where=where: spmmgnn_run(where, 1, args.device, cfg,
                                                                  timeout))
            got["tuned_torch"] = step(f"tuned torch, n={n:,}", lambda where=where: torch_run(
                where, args.device, cfg, timeout))
            if i == 0 and (args.extras or args.quick):
                res["extras"] = extras(args, cfg, where, n, got, step, timeout)
        search = cfg["search_seconds"]
        cap = cfg["cap_gib"] * GIB
        picks = dict(torch=lambda g: (g.get("tuned_torch") or {}).get("uncached", {})
                     .get("peak_bytes"),
                     spmmgnn=lambda g: (g.get("spmmgnn") or {}).get("uncached", {})
                     .get("peak_bytes"))
        if search > 0:
            res["largest"] = {}
            for kind, pick in picks.items():
                pv = per_vertex(res, cfg["sizes"], pick)
                if pv is None:
                    continue
                got = step(f"largest graph, {kind}", lambda kind=kind, pv=pv: largest_graph(
                    kind, cap, pv, cfg, args.device, search / len(picks), timeout))
                if got is not None:
                    res["largest"][kind] = got
    res["seconds"] = time.perf_counter() - t_start
    res["load_end"] = os.getloadavg()
    text = render(res)
    write_json(out, res)
    from spmmgnn.runtime.atomic import write_text_atomic

    write_text_atomic(out.with_suffix(".md"), text)
    print(text)
    return 1 if errors else 0


def extras(args, cfg: dict, where: Path, n: int, got: dict, step, timeout: float) -> dict:
    """P = 2 (its losses equal P = 1's), the local product, the numpy path's losses with
    dropout 0 (the device path's then; with dropout the two draw different masks) and the
    best CPU layout."""
    ex: dict = {"checks": {}}
    one = step("spmmgnn P = 1 with the local product", lambda: spmmgnn_run(
        where, 1, args.device, cfg, timeout, cfg["repeat"]))
    two = step("spmmgnn P = 2", lambda: spmmgnn_run(where, 2, args.device, cfg, timeout))
    if one is not None:
        ex["local_product"] = one.pop("local_product", None)
    if one is not None and two is not None:
        ex["P2"] = two
        ex["checks"]["P = 2 vs P = 1 losses, max relative difference"] = max(
            rel_diff(two[k]["losses"], one[k]["losses"]) for k in ("uncached", "cached"))
    for P in (1, 2):
        runs = [step(f"{name}, dropout 0, P = {P}", lambda P=P, d=d: spmmgnn_run(
            where, P, d, cfg, timeout, dropout=0.0))
            for name, d in (("device path", args.device), ("numpy path", "none"))]
        if None not in runs:
            ex["checks"][f"device vs numpy path losses, dropout 0, P = {P}"] = max(
                rel_diff(runs[0][k]["losses"], runs[1][k]["losses"])
                for k in ("uncached", "cached"))
    ex["best_cpu"] = step("best CPU layout", lambda: best_cpu(cfg, n, args.quick, where,
                                                              timeout))
    return ex


if __name__ == "__main__":
    sys.exit(main())
