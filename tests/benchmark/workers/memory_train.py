"""MPI worker: the memory one rank uses while training from an HDF5 graph, measured as the
kernel's high-water mark of resident memory above the rank's baseline.

Usage: mpiexec -n P python memory_train.py OUT.json GRAPH.h5 ALGORITHM C [HIDDEN [CODEC]]
(C: the replication c, or a 2D/3D grid shape such as 2x2)

A first pass (load, build the trainer, two training steps) does the imports, loads the numba
kernels and touches MPI's shared-memory buffers; everything is then freed (the arrays the
recycler of ``spmmgnn.runtime.buffers`` keeps included). The second pass
starts from the resident size ``base`` with the high-water mark reset
(``/proc/self/clear_refs``) and reports two peaks above ``base``: ``load`` (reading the
block row and building the operator and the trainer) and ``train`` (two training steps,
the high-water mark reset again after the load). tracemalloc would miss torch's allocations,
so this counts pages: run it with ``MALLOC_MMAP_THRESHOLD_`` fixed (the test uses 64 KiB)
so that a freed array leaves the resident set instead of staying in malloc's heap.
Rank 0 writes {"load": [...], "train": [...], "held": [...]} in bytes per rank.
"""

from __future__ import annotations

import gc
import json
import sys
import warnings

from mpi4py import MPI

from spmmgnn import ProcessGrid
from spmmgnn.grid import parse_grid
from spmmgnn.runtime.buffers import RECYCLER
from spmmgnn.training import TrainConfig, Trainer, load_h5_distributed

comm = MPI.COMM_WORLD
path, algorithm, c = sys.argv[2], sys.argv[3], sys.argv[4]
hidden = int(sys.argv[5]) if len(sys.argv) > 5 else 64
options = dict(codec=sys.argv[6]) if len(sys.argv) > 6 else {}
grid = ProcessGrid(comm, shape=parse_grid(c)) if "x" in c else ProcessGrid(comm, int(c))


def status(key: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


def reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")


def setup():
    data = load_h5_distributed(path, grid, "gcn", algorithm, **options)
    return Trainer(data, TrainConfig(hidden=hidden, progress=False, eval_every=0))


with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # the split it draws, said once per load
    trainer = setup()
    trainer.train_step(1)
    trainer.train_step(2)
    del trainer
    gc.collect()
    RECYCLER.clear()  # the step's recycled arrays are freed too (they would sit in base)
    comm.Barrier()
    base = status("VmRSS")
    reset_peak()
    trainer = setup()
    comm.Barrier()
    load = status("VmHWM") - base
    held = status("VmRSS") - base
    reset_peak()
    trainer.train_step(1)
    trainer.train_step(2)
    train = status("VmHWM") - base
out = {k: comm.gather(int(v), root=0) for k, v in
       (("load", load), ("train", train), ("held", held))}
if comm.rank == 0:
    with open(sys.argv[1], "w") as fh:
        json.dump(out, fh)
