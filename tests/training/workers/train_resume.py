"""MPI worker: ``spmmgnn train ARGS`` that is killed (MPI_Abort) right after epoch K.

Usage: mpiexec -n P python train_resume.py K train [train flags...]
Simulates a job lost mid-run; the checkpoints it wrote before must be usable by --resume.
"""

from __future__ import annotations

import sys

from mpi4py import MPI

from spmmgnn.cli import build_parser
from spmmgnn.commands import train

kill_after = int(sys.argv[1])
args = build_parser().parse_args(sys.argv[2:])


def kill(epoch, row, trainer):
    if epoch == kill_after:
        MPI.COMM_WORLD.Abort(17)


train.run(args, on_epoch_end=kill)
