"""The training step's dense part against its ops timed alone, at T = 1, 2, 4, ... threads
(issue 48: "the step at T threads costs no more than the sum of its ops timed alone at T
threads; every op measured at T = 1, 2, 4, 8, 16").

One process, ``sparse1d`` at P = 1, the 2-layer GCN of the issue (CSBM, ``--n`` vertices,
128 features, hidden 128, ``--classes``, dropout 0.5, float32, no cached first-layer
aggregation). At each T: the median ``dense`` part of ``--steps`` training steps after two
(the trainer's own breakdown: forward + backward less the SpMMs, plus Adam), and each dense
op of that step alone, on arrays of the step's shapes, median of ``--repeat`` calls:

- forward: layer 1's product ``(A X) W1`` (n x 128 @ 128 x 128), the fused bias + ReLU +
  dropout, layer 2's product ``H1 W2`` (n x 128 @ 128 x C), its bias add, the loss over the
  training rows;
- backward, each through autograd on its own graph (``retain_graph``): the loss, the bias
  add, layer 2's product (the input gradient and the weight gradient), ReLU + dropout (with
  the bias gradient), layer 1's product (the weight gradient only: X needs none);
- Adam (the library's fused kernel) on the four parameters.

Writes ``bench/results/dense-ops.{json,md}`` (``--out`` to change the stem): per T the step's
dense part, the sum of the ops, their ratio, and every op.

    python bench/dense_ops.py --n 1000000 --threads 1 2 4 8 16   # the issue's graph
    python bench/dense_ops.py --n 90000                           # this machine's cores
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

from spmmgnn.atomic import write_text_atomic

from common import RESULTS, machine, write_json


def _median_ms(fn, repeat: int) -> float:
    fn()  # the first call compiles or loads kernels
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(times))


def op_times(n: int, features: int, hidden: int, classes: int, repeat: int) -> dict:
    """Each dense op of the GCN step alone, ms (the running threads: the caller's setting)."""
    import torch

    from spmmgnn.nn.dropout import relu_dropout
    from spmmgnn.nn.linear import linear
    from spmmgnn.training.metrics import rows_loss_sum
    from spmmgnn.training.optim import Adam

    rng = np.random.default_rng(0)
    z1 = torch.from_numpy(rng.standard_normal((n, features), dtype=np.float32))
    w1 = torch.randn(features, hidden, requires_grad=True)
    b1 = torch.zeros(hidden, requires_grad=True)
    w2 = torch.randn(hidden, classes, requires_grad=True)
    b2 = torch.zeros(classes, requires_grad=True)
    ids = np.arange(n, dtype=np.int64)
    labels = torch.from_numpy(rng.integers(0, classes, n))
    rows = torch.from_numpy(np.flatnonzero(rng.random(n) < 0.6))
    y1 = linear(z1, w1).detach().requires_grad_()
    h1 = relu_dropout(y1, ids, 0.5, 0, 1, 1, bias=b1)
    h1_in = h1.detach().requires_grad_()
    t2 = linear(h1_in, w2).detach().requires_grad_()
    logits = (t2 + b2).detach().requires_grad_()
    out = {}
    with torch.enable_grad():
        out["forward: layer 1 product"] = _median_ms(lambda: linear(z1, w1), repeat)
        out["forward: bias + ReLU + dropout"] = _median_ms(
            lambda: relu_dropout(y1, ids, 0.5, 0, 1, 1, bias=b1), repeat)
        out["forward: layer 2 product"] = _median_ms(lambda: linear(h1_in, w2), repeat)
        out["forward: layer 2 bias"] = _median_ms(lambda: t2 + b2, repeat)
        out["forward: loss"] = _median_ms(lambda: rows_loss_sum(logits, labels, rows), repeat)

        def backward(y: torch.Tensor, grad: torch.Tensor | None = None):
            return lambda: y.backward(grad, retain_graph=True)

        loss = rows_loss_sum(logits, labels, rows) / rows.numel()
        out["backward: loss"] = _median_ms(backward(loss), repeat)
        g_logits = torch.randn(n, classes)
        out["backward: layer 2 bias"] = _median_ms(backward(t2 + b2, g_logits), repeat)
        out["backward: layer 2 product"] = _median_ms(backward(linear(h1_in, w2), g_logits),
                                                      repeat)
        g_h1 = torch.randn(n, hidden)
        out["backward: bias + ReLU + dropout"] = _median_ms(
            backward(relu_dropout(y1, ids, 0.5, 0, 1, 1, bias=b1), g_h1), repeat)
        out["backward: layer 1 product"] = _median_ms(backward(linear(z1, w1), g_h1), repeat)
    params = [w1, b1, w2, b2]
    for p in params:
        p.grad = torch.randn_like(p)
    opt = Adam(params, lr=0.01, fused=True)
    out["Adam"] = _median_ms(opt.step, repeat)
    return out


def step_dense(n: int, features: int, hidden: int, classes: int, steps: int) -> dict:
    """The trainer's median step and dense part, ms, at the running threads."""
    import spmmgnn
    from spmmgnn.data.csbm import csbm
    from spmmgnn.training import TrainConfig, Trainer, distribute_graph

    g = csbm(n=n, avg_degree=16.0, num_features=features, num_classes=classes, seed=0)
    data = distribute_graph(g, spmmgnn.ProcessGrid(), "gcn", algorithm="sparse1d")
    cfg = TrainConfig(model="gcn", layers=2, hidden=hidden, dropout=0.5, epochs=1,
                      eval_every=0, progress=False, cache_input_aggregation=False)
    trainer = Trainer(data, cfg)
    rows = [trainer.train_step(e) for e in range(1, steps + 3)][2:]
    return dict(step=1e3 * float(np.median([r["seconds"] for r in rows])),
                dense=1e3 * float(np.median([r["breakdown"]["dense"] for r in rows])),
                spmm_local=1e3 * float(np.median([r["breakdown"]["spmm_local"] for r in rows])))


def markdown(data: dict) -> str:
    a = data["args"]
    lines = [f"# The dense part against its ops alone ({data['when']})", "",
             f"`python bench/dense_ops.py --n {a['n']} --threads "
             f"{' '.join(map(str, a['threads']))}` on {data['machine']['cores']} cores "
             f"({data['machine']['platform']}); 1-minute load "
             f"{data['load'][0]:.1f} at the start, {data['load'][1]:.1f} at the end.", "",
             f"GCN, 2 layers, CSBM n = {a['n']}, {a['features']} features, hidden "
             f"{a['hidden']}, {a['classes']} classes, dropout 0.5, float32, no cache, P = 1; "
             f"medians of {a['steps']} steps after 2 and of {a['repeat']} calls of each op.",
             "", "| T | step ms | dense ms | ops alone ms | dense / ops |",
             "|---:|---:|---:|---:|---:|"]
    for r in data["rows"]:
        lines.append(f"| {r['threads']} | {r['step']:.1f} | {r['dense']:.1f} | "
                     f"{r['ops_sum']:.1f} | {r['dense'] / r['ops_sum']:.2f} |")
    names = list(data["rows"][0]["ops"])
    lines += ["", "Each op alone, ms:", "",
              "| op | " + " | ".join(f"T = {r['threads']}" for r in data["rows"]) + " |",
              "|---|" + "---:|" * len(data["rows"])]
    for name in names:
        lines.append(f"| {name} | " + " | ".join(f"{r['ops'][name]:.2f}"
                                                 for r in data["rows"]) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=90_000)
    ap.add_argument("--features", type=int, default=128)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--classes", type=int, default=8)
    ap.add_argument("--threads", type=int, nargs="+")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--out", default=str(RESULTS / "dense-ops"))
    args = ap.parse_args()
    import torch

    import spmmgnn

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    args.threads = args.threads or [t for t in (1, 2, 4, 8, 16, 32, 64) if t <= cores]
    load0 = os.getloadavg()[0]
    rows = []
    for t in args.threads:
        spmmgnn.set_threads(t)
        torch.set_num_threads(t)
        step = step_dense(args.n, args.features, args.hidden, args.classes, args.steps)
        ops = op_times(args.n, args.features, args.hidden, args.classes, args.repeat)
        rows.append(dict(threads=t, **step, ops=ops, ops_sum=sum(ops.values())))
        print(f"T={t}: step {step['step']:.1f} dense {step['dense']:.1f} ops alone "
              f"{rows[-1]['ops_sum']:.1f} ms", flush=True)
        # written after each T: a run stopped at its time limit keeps what it measured
        data = dict(when=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                    machine=machine(), load=[load0, os.getloadavg()[0]], args=vars(args),
                    rows=rows)
        write_json(Path(args.out).with_suffix(".json"), data)
        write_text_atomic(Path(args.out).with_suffix(".md"), markdown(data))
    print(markdown(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
