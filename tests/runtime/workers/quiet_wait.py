"""MPI worker: ranks waiting for root inside ``from_scipy`` sleep instead of spinning.

Root's own work is made slow here (its matrix check sleeps 0.3 s, and cutting each block
row sleeps 0.6 s): the waiting ranks must be runnable (on a core, or queued for one: Linux's
/proc/self/schedstat) for a small part of the call's wall time. A rank that spins is
runnable all the time whatever the load; its CPU time alone would depend on the load (at
load 20 on 2 cores a spinner gets ~0.1 s of CPU a second).

Usage: mpiexec -n P python quiet_wait.py OUT.json
(rank 0 writes [[runnable, cpu, wall], ...] in seconds)
"""

from __future__ import annotations

import json
import sys
import time

import scipy.sparse as sp
from mpi4py import MPI

import spmmgnn
from spmmgnn.algorithms import construct

comm = MPI.COMM_WORLD
A = sp.random(400, 400, density=0.02, format="csr", random_state=0) + sp.eye(400)
spmmgnn.DistSpMM.from_scipy(A, algorithm="sparse1d")  # warm: imports, kernels, threads


class SlowRows(sp.csr_array):
    """Root's matrix, whose block rows take 0.6 s each to cut (root's work in the scatter)."""

    def __getitem__(self, key):
        time.sleep(0.6)
        return sp.csr_array(super().__getitem__(key))


checked = construct._check_matrix


def slow_check(*args, **kwargs):
    time.sleep(0.3)  # root's check and partition, made long
    A, rows, cols = checked(*args, **kwargs)
    return SlowRows(A), rows, cols


if comm.rank == 0:
    construct._check_matrix = slow_check


def runnable() -> float:
    """Seconds this process's main thread has been on a core or waiting for one."""
    with open("/proc/self/schedstat") as fh:
        on_cpu, queued = fh.read().split()[:2]
    return (int(on_cpu) + int(queued)) * 1e-9


comm.Barrier()
wall, cpu, run = time.perf_counter(), time.process_time(), runnable()
spmmgnn.DistSpMM.from_scipy(A if comm.rank == 0 else None, algorithm="sparse1d")
got = [runnable() - run, time.process_time() - cpu, time.perf_counter() - wall]
every = comm.gather(got)
if comm.rank == 0:
    with open(sys.argv[1], "w") as fh:
        json.dump(every, fh)
