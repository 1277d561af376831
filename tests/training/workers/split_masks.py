"""MPI worker: the split a training run would use, in source-graph vertex ids.

Usage: python split_masks.py OUT.json [train flags...]   (e.g. --dataset DIR --seed 3)
Loads the data exactly as ``spmmgnn train`` does (``training.run.load_data``) and writes,
from rank 0, the sorted vertex ids of each split, the global counts and the split note.
"""

from __future__ import annotations

import json
import sys

import numpy as np
from mpi4py import MPI

from spmmgnn import ProcessGrid
from spmmgnn.cli import build_parser
from spmmgnn.training.run import load_data

comm = MPI.COMM_WORLD
args = build_parser().parse_args(["train", *sys.argv[2:]])
data = load_data(args, ProcessGrid(comm, args.replication), "gcn")
out = {}
for split, mask in data.masks.items():
    ids = comm.gather(data.vertex_ids[mask.numpy()], root=0)
    if comm.rank == 0:
        out[split] = np.sort(np.concatenate(ids)).tolist()
if comm.rank == 0:
    out.update(counts=data.counts, note=data.info["split"]["note"],
               fingerprint=data.fingerprint)
    with open(sys.argv[1], "w") as fh:
        json.dump(out, fh)
