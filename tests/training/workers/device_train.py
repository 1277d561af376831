"""MPI worker: the trainer on a device grid against the numpy/numba trainer, loss by loss.

Usage: mpiexec -n P python device_train.py OUT.json DEVICE
Each case trains the same GCN on the same (directed, unevenly partitioned) CSBM graph twice,
without dropout (the torch backend draws other masks than the host's), with device=None and
with ``DEVICE`` ("cpu" in CI, "cuda" in the gpu tests); then a run on the device checkpoints
mid-way and the checkpoint is resumed on the other path, both ways. With dropout on, the
device run is repeated (over MPI and over torch.distributed) and resumed on the device.
Rank 0 writes {"cases": [{name, none, on_device}], "device_then_none": ..., ...}.
"""

from __future__ import annotations

import json
import sys
import tempfile
import traceback
from pathlib import Path

import numpy as np
import torch
from mpi4py import MPI

import spmmgnn
from spmmgnn import ALGORITHMS
from spmmgnn.data.csbm import csbm
from spmmgnn.training import TrainConfig, Trainer, distribute_graph

# the workers tests of several folders share (tests/workers/), imported as siblings
sys.path.insert(1, str(Path(__file__).resolve().parents[2] / "workers"))
from common import one_way  # noqa: E402

GRAPH = dict(n=157, avg_degree=5.0, num_features=12, num_classes=4, homophily=0.6,
             signal=1.0, seed=7)
EPOCHS = 8
CASES = [  # dropout 0: the backends draw different dropout masks
    dict(name="cache", algorithm="sparse1d", cache=True),
    dict(name="no cache", algorithm="sparse1d", cache=False),
    dict(name="codec bfloat16", algorithm="sparse1d", cache=True, codec="bfloat16"),
    dict(name="codec int4, no cache", algorithm="sparse1d", cache=False, codec="int4"),
    dict(name="oblivious1d, float64", algorithm="oblivious1d", cache=False,
         dtype="float64"),
    dict(name="empty block, label propagation", algorithm="sparse1d", cache=True,
         empty=True, label_propagation=0.3),
    dict(name="prepost1d, no cache", algorithm="prepost1d", cache=False),
]
# dropout on: the device run again (MPI and torch.distributed) and resumed on the device
DROPOUT = dict(name="dropout+input dropout", algorithm="sparse1d", dropout=0.5,
               input_dropout=0.2, cache=True)

comm = MPI.COMM_WORLD
P = comm.size
DEVICE = sys.argv[2]
torch.set_num_threads(1)
spmmgnn.set_threads(1)


def graph():
    """A directed CSBM graph (A != A^T): 70 % of the edges kept, one direction each."""
    return one_way(csbm(**GRAPH))


def partition(case, k, n):
    """Uneven blocks (random), or all rows in the last block (the others empty)."""
    if case.get("empty") and k > 1:
        return [0] * (k - 1) + [n]
    return np.random.default_rng(11).integers(0, k, n)


def config(case, device, epochs=EPOCHS, **kw):
    return TrainConfig(model="gcn", layers=2, hidden=16, dropout=case.get("dropout", 0.0),
                       input_dropout=case.get("input_dropout", 0.0), lr=0.01,
                       weight_decay=5e-4, epochs=epochs, seed=5, progress=False,
                       eval_every=2, dtype=case.get("dtype", "float32"),
                       cache_input_aggregation=case["cache"], device=device,
                       label_propagation=case.get("label_propagation", 0.0), **kw)


def train(case, device, transport="mpi", **kw):
    grid = ALGORITHMS[case["algorithm"]].grid_for(comm, 1, device=device, transport=transport)
    g = graph() if comm.rank == 0 else None
    options = dict(codec=case["codec"], codec_seed=5) if case.get("codec") else {}
    data = distribute_graph(g, grid, "gcn", algorithm=case["algorithm"],
                            partition=partition(case, grid.n_block_rows, GRAPH["n"]),
                            **options)
    loaded = data.op.comm_stats()["bytes_sent_by_tier"]["device_host"]  # the data's scatter
    trainer = Trainer(data, config(case, device, transport=transport, **kw))
    out = trainer.fit()
    stats = data.op.comm_stats()
    on = [p.device.type for p in trainer.params] + [trainer.flat.device.type]
    return dict(losses=[h["loss"] for h in out["history"]],
                acc=[h.get("val_acc") for h in out["history"]], device=out["device"],
                epochs=[h["epoch"] for h in out["history"]],
                device_host=stats["bytes_sent_by_tier"].get("device_host", 0) - loaded,
                bytes_sent=stats["bytes_sent"], allreduce_bytes=stats["allreduce_bytes"],
                flat_bytes=trainer.flat.numel() * trainer.flat.element_size(),
                param_bytes=sum(p.numel() * p.element_size() for p in trainer.params),
                evaluations=sum("val_acc" in h for h in out["history"]),
                params_on=sorted(set(on)))


def resume(first, second, case, tmp):
    """Train EPOCHS on device ``first``; train EPOCHS // 2 on it again with a checkpoint at
    the end and resume that checkpoint on ``second`` up to EPOCHS: both loss lists."""
    path = str(Path(tmp) / f"ckpt-{first}-{second}.npz")
    full = train(case, first)
    train(case, first, epochs=EPOCHS // 2, checkpoint=path, overwrite_checkpoint=True)
    rest = train(case, second, checkpoint=path, resume=True)
    return dict(full=full["losses"], rest=rest["losses"], rest_epochs=rest["epochs"])


def repeat() -> dict:
    """With dropout on, the device run twice over MPI and once over torch.distributed (not
    NCCL with ranks sharing one GPU, which it refuses), and the host run (other masks)."""
    runs = dict(mpi=train(DROPOUT, DEVICE), again=train(DROPOUT, DEVICE),
                host=train(DROPOUT, None))
    if DEVICE == "cpu" or P == 1:
        runs["torch"] = train(DROPOUT, DEVICE, transport="torch")
    return {k: r["losses"] for k, r in runs.items()}


result = dict(P=P, device=DEVICE, cases=[])
for case in CASES:
    row = dict(case)
    try:
        plain, dev = train(case, None), train(case, DEVICE)
        row.update(none=plain, on_device=dev)
    except Exception as exc:  # report, don't hang: every rank fails the same way here
        row["error"] = f"{type(exc).__name__}: {exc}"
        if comm.rank == 0:
            traceback.print_exc()
    result["cases"].append(row)

tmp = comm.bcast(tempfile.mkdtemp(prefix="spmmgnn-devtrain-") if comm.rank == 0 else None)
JOBS = {"device_then_none": lambda: resume(DEVICE, None, CASES[0], tmp),
        "none_then_device": lambda: resume(None, DEVICE, CASES[0], tmp),
        "dropout_resumed": lambda: resume(DEVICE, DEVICE, DROPOUT, tmp),
        "dropout_repeat": repeat}
for key, job in JOBS.items():
    try:
        result[key] = job()
    except Exception as exc:
        result[key] = dict(error=f"{type(exc).__name__}: {exc}")
        if comm.rank == 0:
            traceback.print_exc()

if comm.rank == 0:
    with open(sys.argv[1], "w") as fh:
        json.dump(result, fh)
