"""MPI worker: the trainer on every backend and transport, loss by loss.

Usage: mpiexec -n P python transport_train.py OUT.json CASES
``CASES``: comma-separated names of ``CASES`` below (the family and its grid). Each trains
the same 2-layer GCN (dropout 0: the backends may draw different masks) for ``EPOCHS``
epochs on a directed CSBM graph (uneven blocks where the family takes a partition) in the
runs of ``RUNS``: the host backend over MPI (default buckets, and one bucket per parameter),
and the torch backend on ``device="cpu"`` over Gloo (torch.distributed) and over MPI (staged
through host buffers), both with one bucket per parameter, so the gradient sums are posted
during the backward. Rank 0 writes {"P", "cases": {name: {run: {...} or {"error"}}}}.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

import numpy as np
import torch
from mpi4py import MPI

import spmmgnn
from spmmgnn import ALGORITHMS
from spmmgnn.data.csbm import csbm
from spmmgnn.training import TrainConfig, Trainer, distribute_graph, step

# the workers tests of several folders share (tests/workers/), imported as siblings
sys.path.insert(1, str(Path(__file__).resolve().parents[2] / "workers"))
from common import one_way  # noqa: E402

GRAPH = dict(n=131, avg_degree=5.0, num_features=10, num_classes=4, homophily=0.6,
             signal=1.0, seed=7)
EPOCHS = 5
CASES = dict(
    sparse1d=dict(algorithm="sparse1d"),
    sparse15d=dict(algorithm="sparse15d", replication=2),
    oblivious2d=dict(algorithm="oblivious2d", grid="2x2"),
    sparse2d=dict(algorithm="sparse2d", grid="2x2"),
    sparse3d=dict(algorithm="sparse3d", grid="2x1x2"),
    plexus3d=dict(algorithm="plexus3d", grid="2x1x2"),
)
# run -> (device, transport, bytes per bucket: 0 is one bucket per parameter)
RUNS = {"host-mpi": (None, "mpi", step.BUCKET_BYTES), "host-mpi-buckets": (None, "mpi", 0),
        "cpu-gloo": ("cpu", "torch", 0), "cpu-mpi": ("cpu", "mpi", 0)}

comm = MPI.COMM_WORLD
torch.set_num_threads(1)
spmmgnn.set_threads(1)


def train(case: dict, device, transport: str, bucket_bytes: int) -> dict:
    algo = case["algorithm"]
    grid = ALGORITHMS[algo].grid_for(comm, case.get("replication", 1), case.get("grid"),
                                     device=device, transport=transport)
    g = one_way(csbm(**GRAPH)) if comm.rank == 0 else None
    part = None
    if "grid" not in case:  # uneven blocks, the same on every rank
        part = np.random.default_rng(11).integers(0, grid.n_block_rows, GRAPH["n"])
    data = distribute_graph(g, grid, "gcn", algorithm=algo, partition=part)
    config = TrainConfig(model="gcn", layers=2, hidden=12, dropout=0.0, lr=0.02,
                         weight_decay=5e-4, epochs=EPOCHS, seed=5, progress=False,
                         eval_every=2, device=device, transport=transport)
    step.BUCKET_BYTES = bucket_bytes
    trainer = Trainer(data, config)
    setup = data.op.comm_stats()
    out = trainer.fit()
    stats = data.op.comm_stats()
    return dict(losses=[h["loss"] for h in out["history"]],
                val=[h.get("val_loss") for h in out["history"]],
                device=out["device"], transport=out["transport"],
                buckets=len(trainer.buckets.bounds), params=len(trainer.params),
                device_host=stats["bytes_sent_by_tier"]["device_host"],
                device_host_setup=setup["bytes_sent_by_tier"]["device_host"],
                bytes_sent=stats["bytes_sent"] - setup["bytes_sent"],
                flat_bytes=trainer.flat.numel() * trainer.flat.element_size(),
                param_bytes=sum(p.numel() * p.element_size() for p in trainer.params),
                evaluations=sum("val_acc" in h for h in out["history"]))


def main() -> None:
    default = step.BUCKET_BYTES
    result = dict(P=comm.size, cases={})
    for name in sys.argv[2].split(","):
        runs = result["cases"][name] = {}
        for run, (device, transport, bucket_bytes) in RUNS.items():
            try:
                runs[run] = train(CASES[name], device, transport, bucket_bytes or 1)
            except Exception as exc:  # report, don't hang: every rank fails the same way
                runs[run] = dict(error=f"{type(exc).__name__}: {exc}")
                if comm.rank == 0:
                    traceback.print_exc()
            finally:
                step.BUCKET_BYTES = default
    if comm.rank == 0:
        with open(sys.argv[1], "w") as fh:
            json.dump(result, fh)


main()
