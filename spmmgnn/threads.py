"""Threads per rank: ranks on one node x threads per rank must not exceed its cores.

The library's threads apply to its own work only: an operator records them, and each
library call that runs kernels sets them for the calling thread and puts the caller's back
when it returns (``scope``); only an explicit ``set_threads`` changes the process."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable

import numpy as np
from mpi4py import MPI

from .errors import agree
from .jit import numba_pool
from .wire import allgather_json

ENV_VAR = "SPMMGNN_THREADS"
_threads: int | None = None  # the library's threads (set_threads, or the first operator)
_blas: list | None = None    # threadpoolctl's controllers of the loaded BLAS libraries


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
        node_sets = [set(s) for s in allgather_json(node, sorted(mine))]
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
    """Set the threads this rank's library calls use (numba's local kernels, numpy's BLAS in
    the layers' products) and apply them now, to the calling thread's numba count and to
    the process's OpenBLAS: an explicit choice (``spmmgnn train --threads`` makes it too).
    Returns the value applied (at least 1, at most numba's pool size)."""
    import numba  # loaded by the first command that runs kernels, not by ``import spmmgnn``

    global _threads
    numba_pool()
    n = max(1, min(int(n), numba.config.NUMBA_NUM_THREADS))
    _threads = n
    numba_pool()[1](n)
    for lib in _blas_libs():
        lib.set_num_threads(n)
    return n


def set_blas_threads(n: int) -> None:
    """Limit the BLAS libraries loaded in this process (numpy's OpenBLAS) to ``n`` threads,
    so ranks sharing a node do not run cores x ranks BLAS threads (explicit calls only)."""
    for lib in _blas_libs():
        lib.set_num_threads(n)


def _blas_libs() -> list:
    """threadpoolctl's controllers of the BLAS libraries loaded now (found once: ~ms)."""
    global _blas
    if _blas is None:
        from threadpoolctl import ThreadpoolController

        _blas = list(ThreadpoolController().select(user_api="blas").lib_controllers)
    return _blas


def ensure_threads(comm: MPI.Comm) -> None:
    """Collective over ``comm``: the first time any rank builds an operator, choose
    ``default_threads(comm)`` as the library's threads unless they were already chosen.
    Only recorded: the library's calls apply it inside themselves (``scope``), the caller's
    numba, BLAS and torch settings stay as they are. numba alone starts one thread per core
    in every rank, so P ranks on a node would oversubscribe its cores (at P = 2 on 2 cores:
    2-10x the per-call time of one thread per rank, bench/percall.py)."""
    chosen = np.array([_threads is not None], dtype=np.int32)
    if comm.Get_size() > 1:  # default_threads is collective: all ranks call it, or none
        comm.Allreduce(MPI.IN_PLACE, chosen, op=MPI.MIN)
    if not chosen[0]:
        threads = default_threads(comm)
        if _threads is None:
            _choose(threads)


def _choose(n: int) -> None:
    import numba

    global _threads
    numba_pool()
    _threads = max(1, min(int(n), numba.config.NUMBA_NUM_THREADS))


def get_threads() -> int:
    """The library's threads on this rank (numba's count of the calling thread until an
    operator or ``set_threads`` chose them)."""
    return _threads if _threads is not None else numba_pool()[0]()


class scope:
    """``with scope():`` the library's threads for numba in the calling thread (and for the
    BLAS libraries with ``blas=True``) inside, at most ``limit`` of them, the caller's
    counts put back on exit. Nested scopes cost two reads each (~0.2 us); nothing is set
    before the threads are chosen. Results do not depend on the count (every kernel adds in
    a fixed order)."""

    __slots__ = ("blas", "limit", "saved")

    def __init__(self, limit: int | None = None, blas: bool = False):
        self.limit, self.blas = limit, blas
        self.saved = None

    def __enter__(self) -> scope:
        n = _threads
        if n is None:
            return self
        if self.limit is not None:  # a call too small to be worth waking more threads
            n = min(n, self.limit)
        get, put = numba_pool()
        before = get()
        if before != n:
            put(n)
        blas = None
        if self.blas:
            blas = [lib.get_num_threads() for lib in _blas_libs()]
            for lib, b in zip(_blas, blas, strict=True):
                if b != n:
                    lib.set_num_threads(n)
        self.saved = (before, n, blas)
        return self

    def __exit__(self, *exc) -> None:
        if self.saved is None:
            return
        before, n, blas = self.saved
        self.saved = None
        if before != n:
            numba_pool()[1](before)
        if blas is not None:
            for lib, b in zip(_blas, blas, strict=True):
                if b != n:
                    lib.set_num_threads(b)


def scoped(fn: Callable) -> Callable:
    """``fn`` run inside ``scope()`` (numba only: BLAS calls take ``scope(blas=True)``)."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        with scope():
            return fn(*args, **kwargs)

    return run
