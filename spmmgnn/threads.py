"""Threads per rank: ranks on one node x threads per rank must not exceed its cores."""

from __future__ import annotations

import os

import numba
from mpi4py import MPI

ENV_VAR = "SPMMGNN_THREADS"


def ranks_on_this_node(comm: MPI.Comm = MPI.COMM_WORLD) -> int:
    """Number of ranks of ``comm`` that share this node (collective)."""
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        return node.Get_size()
    finally:
        node.Free()


def default_threads(comm: MPI.Comm = MPI.COMM_WORLD) -> int:
    """``$SPMMGNN_THREADS`` if set, else cores / ranks on this node (at least 1). Collective."""
    local = ranks_on_this_node(comm)
    env = os.environ.get(ENV_VAR)
    if env:
        return max(1, int(env))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, (cores or 1) // local)


def set_threads(n: int) -> int:
    """Set the numba threads this rank uses for local kernels; returns the value applied."""
    n = max(1, min(int(n), numba.config.NUMBA_NUM_THREADS))
    numba.set_num_threads(n)
    return n


def get_threads() -> int:
    return numba.get_num_threads()
