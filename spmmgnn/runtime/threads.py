"""Threads per rank: ranks on one node x threads per rank must not exceed its cores.

The library's threads apply to its own work only: an operator records them, and each
library call that runs kernels sets them for the calling thread and puts the caller's back
when it returns (``scope``); only an explicit ``set_threads`` changes the process.

Busy cores: a parallel region ends when its last thread does, so a thread whose
core another process keeps busy holds every region of the step, and waking it on that core
costs a scheduler slice each time (1 rank x 2 threads with a spinner on one core: the dense
part 33x slower than 2 ranks x 1 thread). The scopes therefore run the library's kernels on
``min(threads, cores free of other work)`` threads (``_look``, every ``LOOK_SECONDS``, from
``/proc/stat`` and this process's CPU time; ``$SPMMGNN_BUSY_CORES`` to fix the busy count).
The work is still split for the chosen threads (chunks, kernel choices: ``get_threads``),
fewer threads only run the pieces, so the results are those of the chosen count."""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable

import numpy as np
from mpi4py import MPI

from .errors import SpmmgnnError, agree
from .jit import numba_pool
from .machine import core_times, shared_node
from .settings import env_setting
from .wire import allgather_json

ENV_VAR = "SPMMGNN_THREADS"
BUSY_ENV = "SPMMGNN_BUSY_CORES"  # "auto" (measured), or the cores other work keeps busy
LOOK_SECONDS = 0.25  # how often the scopes look at the cores (~0.1 ms a look)
_threads: int | None = None  # the library's threads (set_threads, or the first operator)
_running: int | None = None  # what the scopes run: _threads, fewer while cores are busy
_last: tuple | None = None   # the last look: (monotonic s, busy, total jiffies, CPU s)
_next_look = 0.0
_blas: list | None = None    # (get, set) thread count functions of the loaded BLAS libraries
BLAS_ROWS = 4096  # a BLAS dot of fewer rows runs on one thread (OpenBLAS: up to 10,000)


def affinity() -> set[int]:
    """The cores this process may run on."""
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
    mine = affinity()
    with shared_node(comm) as node:
        node_sets = [set(s) for s in allgather_json(node, sorted(mine))]
    error, value = None, None
    try:
        value = env_setting(ENV_VAR)
    except SpmmgnnError as exc:
        error = str(exc)
    agree(comm, error)
    check_busy_setting(comm)
    if value is not None:
        return int(value)
    return fair_share(mine, node_sets)


def set_threads(n: int) -> int:
    """Set the threads this rank's library calls use (numba's local kernels, numpy's BLAS in
    the layers' products) and apply them now, to the calling thread's numba count and to
    the process's OpenBLAS: an explicit choice (``spmmgnn train --threads`` makes it too).
    Returns the value applied (at least 1, at most numba's pool size)."""
    import numba  # loaded by the first command that runs kernels, not by ``import spmmgnn``

    global _threads, _running
    numba_pool()
    n = max(1, min(int(n), numba.config.NUMBA_NUM_THREADS))
    _threads = _running = n
    _restart_looking()
    numba_pool()[1](n)
    for _, put in _blas_libs():
        put(n)
    return n


def set_blas_threads(n: int) -> None:
    """Limit the BLAS libraries loaded in this process (numpy's OpenBLAS) to ``n`` threads,
    so ranks sharing a node do not run cores x ranks BLAS threads (explicit calls only)."""
    for _, put in _blas_libs():
        put(n)


OPENBLAS_AFFIXES = [(p, s) for p in ("", "scipy_") for s in ("", "64_", "_64")]


def _openblas_calls(dynlib) -> tuple[Callable, Callable] | None:
    """OpenBLAS's own ``openblas_get_num_threads`` / ``openblas_set_num_threads`` in
    ``dynlib`` (their names carry the build's affixes), or None."""
    import ctypes

    for prefix, suffix in OPENBLAS_AFFIXES:
        get = getattr(dynlib, f"{prefix}openblas_get_num_threads{suffix}", None)
        put = getattr(dynlib, f"{prefix}openblas_set_num_threads{suffix}", None)
        if get is not None and put is not None:
            get.restype, get.argtypes = ctypes.c_int, []
            put.restype, put.argtypes = None, [ctypes.c_int]
            return get, put
    return None


def _blas_libs() -> list[tuple[Callable[[], int], Callable[[int], None]]]:
    """(get, set) of the thread count of each BLAS library loaded now (found once: ~ms):
    OpenBLAS's C functions called directly (~0.2 us a call against ~3-7 us through
    threadpoolctl's controller, which the dot and norm of a large vector pay on every call),
    threadpoolctl's controller methods for another BLAS."""
    global _blas
    if _blas is None:
        from threadpoolctl import ThreadpoolController

        found = []
        for lib in ThreadpoolController().select(user_api="blas").lib_controllers:
            raw = _openblas_calls(lib.dynlib) if lib.internal_api == "openblas" else None
            found.append(raw or (lib.get_num_threads, lib.set_num_threads))
        _blas = found
    return _blas


def blas_enter() -> list:
    """What ``scope(blas=True)`` does to the BLAS libraries on entry, without the scope
    object: their thread count set to the library's running threads (nothing before the
    threads are chosen). Returns what ``blas_exit`` puts back. For calls whose only threads
    are BLAS's (``dot``, ``norm``): numpy's OpenBLAS otherwise runs them on all the cores it
    found at load, its idle threads spinning after each call against the other ranks'."""
    if _threads is None:
        return []
    return _blas_to(running_threads())


def _blas_to(n: int) -> list:
    """Every loaded BLAS library on ``n`` threads; returns what ``blas_exit`` puts back."""
    changed = []
    for get, put in _blas_libs():
        before = get()
        if before != n:
            put(n)
            changed.append((put, before))
    return changed


def blas_exit(changed: list) -> None:
    """Put back what ``blas_enter`` (or ``one_blas_thread``) changed."""
    for put, before in changed:
        put(before)


class one_blas_thread:
    """``with one_blas_thread():`` every loaded BLAS library on one thread inside, its
    count put back on exit; whether or not the library's threads are chosen. For products
    whose bits must not depend on the cores: OpenBLAS 0.3.31 gives a float32 ``a @ b``
    (1003 x 40 x 24) other last bits on 2 threads than on 1, so the panel products run
    every BLAS call on one (``dense_host.run_panels``)."""

    __slots__ = ("changed",)

    def __enter__(self) -> one_blas_thread:
        self.changed = _blas_to(1)
        return self

    def __exit__(self, *exc) -> None:
        blas_exit(self.changed)


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

    global _threads, _running
    numba_pool()
    _threads = _running = max(1, min(int(n), numba.config.NUMBA_NUM_THREADS))
    _restart_looking()


def get_threads() -> int:
    """The library's threads on this rank (numba's count of the calling thread until an
    operator or ``set_threads`` chose them)."""
    return _threads if _threads is not None else numba_pool()[0]()


def busy_setting() -> float | None:
    """``$SPMMGNN_BUSY_CORES``: None for ``auto`` (unset: measure), else the cores taken as
    busy with other work (0: always run the chosen threads)."""
    value = env_setting(BUSY_ENV)
    return None if value in (None, "auto") else float(value)


def check_busy_setting(comm: MPI.Comm) -> None:
    """Collective: one SpmmgnnError on every rank of ``comm`` if ``$SPMMGNN_BUSY_CORES``
    is not ``auto`` or a number >= 0 on any of them."""
    error = None
    try:
        busy_setting()
    except SpmmgnnError as e:
        error = str(e)
    agree(comm, error)


def threads_for(threads: int, cores: int, others: float) -> int:
    """Threads to run on ``cores`` when other work keeps ``others`` of them busy: the cores
    left, rounded to the nearest (a core half taken by others is left to them), at least 1,
    at most ``threads``."""
    return max(1, min(threads, int(cores - others + 0.5)))


def others_busy(a: tuple, b: tuple, cores: int) -> float | None:
    """Cores kept busy by other work between two looks ``(monotonic s, busy jiffies, total
    jiffies, this process's CPU s)``: the cores' busy share times ``cores``, less this
    process's own CPU time per second (its threads are not other work)."""
    wall, total = b[0] - a[0], b[2] - a[2]
    if wall <= 0 or total <= 0:
        return None
    return max(0.0, (b[1] - a[1]) / total * cores - (b[3] - a[3]) / wall)


def _sample() -> tuple | None:
    times = core_times(affinity())
    if times is None:
        return None
    return (time.monotonic(), times[0], times[1], time.process_time())


def _restart_looking() -> None:
    global _last, _next_look
    _last = None
    _next_look = 0.0


def _look() -> None:
    """Set the threads the scopes run (``_running``) from the cores other work kept busy
    since the last look (or ``$SPMMGNN_BUSY_CORES``); the next look in ``LOOK_SECONDS``."""
    global _running, _last, _next_look
    _next_look = time.monotonic() + LOOK_SECONDS
    fixed = busy_setting()
    cores = len(affinity())
    if fixed is not None:  # 0: the chosen threads, however many cores the machine has
        _running = threads_for(_threads, cores, fixed) if fixed else _threads
        return
    if _threads == 1:
        return
    now = _sample()
    if now is None:
        return
    if _last is not None:
        others = others_busy(_last, now, cores)
        if others is not None:
            _running = threads_for(_threads, cores, others)
    _last = now


def running_threads() -> int:
    """The threads the library's kernels run on now: its threads, fewer while other work
    keeps cores busy (``scope``)."""
    return _running if _running is not None else get_threads()


def serial_enter() -> int:
    """What ``scope(limit=1)`` does on entry, without the scope object: numba's count of
    the calling thread set to 1 (nothing before the threads are chosen). Returns the count
    to put back with ``serial_exit`` (0: nothing to put back). A one-thread call needs no
    look at the cores (its count is 1 however many are free); the scope object alone cost
    ~1.7 of its ~2.6 us (measured 2026-11-26 at load ~2)."""
    if _threads is None:
        return 0
    get, put = numba_pool()
    before = get()
    if before == 1:
        return 0
    put(1)
    return before


def serial_exit(before: int) -> None:
    """Put back what ``serial_enter`` changed."""
    if before:
        numba_pool()[1](before)


class scope:
    """``with scope():`` the library's running threads (``running_threads``) for numba in
    the calling thread (and for the BLAS libraries with ``blas=True``, for torch's intra-op
    pool with ``torch=True``) inside, at most ``limit`` of them, the caller's counts put
    back on exit. Nested scopes cost two reads and a clock read each (~0.3 us); nothing is
    set before the threads are chosen. Results do not depend on the count (every kernel
    adds in a fixed order)."""

    __slots__ = ("blas", "limit", "saved", "torch")

    def __init__(self, limit: int | None = None, blas: bool = False, torch: bool = False):
        self.limit, self.blas, self.torch = limit, blas, torch
        self.saved = None

    def __enter__(self) -> scope:
        if _threads is None:
            return self
        if time.monotonic() >= _next_look:
            _look()
        n = _running
        if self.limit is not None:  # a call too small to be worth waking more threads
            n = min(n, self.limit)
        get, put = numba_pool()
        before = get()
        if before != n:
            put(n)
        blas = None
        if self.blas:
            blas = [get() for get, _ in _blas_libs()]
            for (_, put), b in zip(_blas, blas, strict=True):
                if b != n:
                    put(n)
        torch_before = None
        if self.torch:
            import torch  # only asked for by callers that hold torch tensors

            torch_before = torch.get_num_threads()
            if torch_before != n:
                torch.set_num_threads(n)
        self.saved = (before, n, blas, torch_before)
        return self

    def __exit__(self, *exc) -> None:
        if self.saved is None:
            return
        before, n, blas, torch_before = self.saved
        self.saved = None
        if before != n:
            numba_pool()[1](before)
        if blas is not None:
            for (_, put), b in zip(_blas, blas, strict=True):
                if b != n:
                    put(b)
        if torch_before is not None and torch_before != n:
            import torch

            torch.set_num_threads(torch_before)


def scoped(fn: Callable) -> Callable:
    """``fn`` run inside ``scope()`` (numba only: BLAS calls take ``scope(blas=True)``)."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        with scope():
            return fn(*args, **kwargs)

    return run
