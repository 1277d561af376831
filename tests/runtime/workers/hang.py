"""MPI worker, launched MPMD: a rank blocked in an MPI call that never returns, set up as the
command line runs (``spmmgnn.runtime.signals.install``: its signal handlers and watchdog).

Usage: mpiexec -n 1 python hang.py DIR barrier : -n 1 python hang.py DIR recv

The ranks disagree on the run and nothing checks it (MPI is called directly): rank 0 waits in
a barrier that rank 1 never enters, rank 1 for a message nobody sends. Each rank writes its
pid to DIR/rank<r>.pid just before it blocks.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
from mpi4py import MPI

from spmmgnn.runtime import signals

signals.install()
comm = MPI.COMM_WORLD
pid_file = Path(sys.argv[1]) / f"rank{comm.rank}.pid"
pid_file.with_suffix(".tmp").write_text(str(os.getpid()))
os.replace(pid_file.with_suffix(".tmp"), pid_file)
if sys.argv[2] == "barrier":
    comm.Barrier()
else:
    comm.Recv(np.empty(1), source=MPI.ANY_SOURCE, tag=77)
