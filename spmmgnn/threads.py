"""Threads per rank: ranks on one node x threads per rank must not exceed its cores."""

from __future__ import annotations

import os

import numpy as np
from mpi4py import MPI

from .errors import agree

ENV_VAR = "SPMMGNN_THREADS"
_chosen = False  # set_threads ran (by the user, a command, or the first operator)


def _affinity() -> set[int]:
    if hasattr(os, "sched_getaffinity"):
        return set(os.sched_getaffinity(0))
    return set(range(os.cpu_count() or 1))


def fair_share(mine: set[int], node_sets: list[set[int]]) -> int:
    """Threads for a rank bound to cores ``mine`` when the ranks of its node are bound to
    ``node_sets`` (its own included): each of its cores counts 1 / (ranks that may run on
    it). Unbound ranks on a node of C cores get C / ranks; ranks bound to disjoint cores get
    all of theirs."""
    share = sum(1.0 / max(1, sum(core in s for s in node_sets)) for core in mine)
    return max(1, int(share + 1e-9))


def default_threads(comm: MPI.Comm = MPI.COMM_WORLD) -> int:
    """``$SPMMGNN_THREADS`` if set, else this rank's fair share of the cores it may run on,
    given the affinity sets of the ranks on its node (``fair_share``). Collective."""
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        mine = _affinity()
        node_sets = [set(s) for s in node.allgather(sorted(mine))]
    finally:
        node.Free()
    env = os.environ.get(ENV_VAR, "").strip()
    error = None
    if env:
        try:
            value = int(env)
            if value < 1:
                raise ValueError
        except ValueError:
            error = f"${ENV_VAR} must be a positive integer, got {env!r}"
    agree(comm, error)
    if env:
        return value
    return fair_share(mine, node_sets)


def set_threads(n: int) -> int:
    """Set the threads this rank uses for local kernels (numba) and for numpy's BLAS (the
    layers' products, ``nn.linear``); returns the value applied."""
    import numba  # loaded by the first command that runs kernels, not by ``import spmmgnn``

    global _chosen
    n = max(1, min(int(n), numba.config.NUMBA_NUM_THREADS))
    numba.set_num_threads(n)
    set_blas_threads(n)
    _chosen = True
    return n


def set_blas_threads(n: int) -> None:
    """Limit the BLAS libraries loaded in this process (numpy's OpenBLAS) to ``n`` threads,
    so ranks sharing a node do not run cores x ranks BLAS threads."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=n, user_api="blas")


def ensure_threads(comm: MPI.Comm) -> None:
    """Collective over ``comm``: the first time any rank builds an operator, apply
    ``default_threads(comm)`` unless the threads were already set. numba alone starts one
    thread per core in every rank, so P ranks on a node would oversubscribe its cores (at
    P = 2 on 2 cores: 2-10x the per-call time of one thread per rank, bench/percall.py)."""
    chosen = np.array([_chosen], dtype=np.int32)
    if comm.Get_size() > 1:  # default_threads is collective: all ranks call it, or none
        comm.Allreduce(MPI.IN_PLACE, chosen, op=MPI.MIN)
    if not chosen[0]:
        threads = default_threads(comm)
        if not _chosen:
            set_threads(threads)


def get_threads() -> int:
    import numba

    return numba.get_num_threads()
