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
- backward, each through ``torch.autograd.grad`` on its own graph (``retain_graph``; the
  gradients are returned, none is added into a leaf's ``.grad``): the loss, the bias
  add, layer 2's product (the input gradient and the weight gradient), ReLU + dropout (with
  the bias gradient), layer 1's product (the weight gradient only: X needs none);
- Adam (the library's fused kernel) on the four parameters.

Each op is timed twice: called again and again (its arrays stay in the cache when they fit)
and with the caches evicted before each call (``op_times(cold=True)``), since in the step an
op's inputs were written by earlier work and need not be cached.

Writes ``bench/results/dense-ops.{json,md}`` (``--out`` to change the stem): per T the step's
dense part, the sum of the ops (both ways), their ratios, and every op.

    python -m bench.dense_ops --n 1000000 --threads 1 2 4 8 16   # the issue's graph
    python -m bench.dense_ops --n 90000                           # this machine's cores
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

from bench import RESULTS
from spmmgnn.benchmark.harness import machine, now
from spmmgnn.benchmark.tables import md_table, publish
from spmmgnn.runtime.machine import llc_bytes


def _timed(fn, repeat: int, evict=None) -> float:
    fn()  # the first call compiles or loads kernels
    times = []
    for _ in range(repeat):
        if evict is not None:
            evict()  # untimed
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(times))


def op_times(n: int, features: int, hidden: int, classes: int, repeat: int,
             cold: bool = False) -> dict:
    """Each dense op of the GCN step alone, ms (the running threads: the caller's setting).
    ``cold``: before each timed call, read a buffer of twice the last-level cache, so the
    op finds none of its arrays cached (in the step each op's inputs were written by
    earlier work; called again and again alone, an op finds them in the cache when they
    fit, as 46 MB arrays do in a large server's L3)."""
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
    flush = np.ones(2 * llc_bytes() // 8) if cold else None
    evict = (lambda: float(flush.sum())) if cold else None

    def _median_ms(fn, repeat: int) -> float:
        return _timed(fn, repeat, evict)

    out = {}
    with torch.enable_grad():
        out["forward: layer 1 product"] = _median_ms(lambda: linear(z1, w1), repeat)
        out["forward: bias + ReLU + dropout"] = _median_ms(
            lambda: relu_dropout(y1, ids, 0.5, 0, 1, 1, bias=b1), repeat)
        out["forward: layer 2 product"] = _median_ms(lambda: linear(h1_in, w2), repeat)
        out["forward: layer 2 bias"] = _median_ms(lambda: t2 + b2, repeat)
        out["forward: loss"] = _median_ms(lambda: rows_loss_sum(logits, labels, rows), repeat)

        def backward(y: torch.Tensor, inputs: tuple, grad: torch.Tensor | None = None):
            # the gradients returned, not added into .grad: the step passes an activation's
            # gradient on and sets each parameter's once, so a leaf's accumulation (a full
            # extra pass over n x 128 for h1_in, y1) is no op of the step
            return lambda: torch.autograd.grad(y, inputs, grad, retain_graph=True)

        loss = rows_loss_sum(logits, labels, rows) / rows.numel()
        out["backward: loss"] = _median_ms(backward(loss, (logits,)), repeat)
        g_logits = torch.randn(n, classes)
        out["backward: layer 2 bias"] = _median_ms(backward(t2 + b2, (t2, b2), g_logits),
                                                   repeat)
        out["backward: layer 2 product"] = _median_ms(
            backward(linear(h1_in, w2), (h1_in, w2), g_logits), repeat)
        g_h1 = torch.randn(n, hidden)
        out["backward: bias + ReLU + dropout"] = _median_ms(
            backward(relu_dropout(y1, ids, 0.5, 0, 1, 1, bias=b1), (y1, b1), g_h1), repeat)
        out["backward: layer 1 product"] = _median_ms(
            backward(linear(z1, w1), (w1,), g_h1), repeat)
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


def render(data: dict) -> str:
    a = data["args"]
    lines = [f"# The dense part against its ops alone ({data['when']})", "",
             f"`python -m bench.dense_ops --n {a['n']} --threads "
             f"{' '.join(map(str, a['threads']))}` on {data['machine']['cores']} cores "
             f"({data['machine']['platform']}); 1-minute load "
             f"{data['load'][0]:.1f} at the start, {data['load'][1]:.1f} at the end.", "",
             f"GCN, 2 layers, CSBM n = {a['n']}, {a['features']} features, hidden "
             f"{a['hidden']}, {a['classes']} classes, dropout 0.5, float32, no cache, P = 1; "
             f"medians of {a['steps']} steps after 2 and of {a['repeat']} calls of each op.",
             f"Ops alone twice: called again and again (their arrays stay in the cache when "
             f"they fit; this machine's largest cache: {data['cache_mib']} MiB), and with "
             f"the caches evicted before each call (a read of twice that).", ""]
    lines += md_table(["T", "step ms", "dense ms", "ops alone ms", "dense / ops",
                       "ops alone, caches evicted, ms", "dense / ops evicted"],
                      [[r["threads"], f"{r['step']:.1f}", f"{r['dense']:.1f}",
                        f"{r['ops_sum']:.1f}", f"{r['dense'] / r['ops_sum']:.2f}",
                        f"{r['ops_cold_sum']:.1f}", f"{r['dense'] / r['ops_cold_sum']:.2f}"]
                       for r in data["rows"]], "rrrrrrr")
    names = list(data["rows"][0]["ops"])
    lines += ["", "Each op alone, ms (caches evicted in brackets):", ""]
    lines += md_table(["op", *(f"T = {r['threads']}" for r in data["rows"])],
                      [[name, *(f"{r['ops'][name]:.2f} ({r['ops_cold'][name]:.2f})"
                                for r in data["rows"])] for name in names],
                      "l" + "r" * len(data["rows"]))
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
        cold = op_times(args.n, args.features, args.hidden, args.classes, args.repeat,
                        cold=True)
        rows.append(dict(threads=t, **step, ops=ops, ops_sum=sum(ops.values()),
                         ops_cold=cold, ops_cold_sum=sum(cold.values())))
        print(f"T={t}: step {step['step']:.1f} dense {step['dense']:.1f} ops alone "
              f"{rows[-1]['ops_sum']:.1f} ms, caches evicted {rows[-1]['ops_cold_sum']:.1f}",
              flush=True)
        # written after each T: a run stopped at its time limit keeps what it measured
        data = dict(when=now(), machine=machine(), load=[load0, os.getloadavg()[0]],
                    args=vars(args), cache_mib=llc_bytes() >> 20, rows=rows)
        publish(args.out, data, render)
    print(render(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
