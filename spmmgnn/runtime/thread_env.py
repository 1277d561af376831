"""The idle-thread settings of the thread runtimes the library loads, kept out of the
caller's environment.

OpenMP (libgomp, which numba's ``omp`` layer and torch share; Intel OpenMP) and OpenBLAS
read how their idle threads wait once, from the environment, when they load; no call
changes it afterwards. Spinning, idle threads take the cores from the next kernel and from
the other ranks of a node: OpenBLAS's spin ~0.1 s after every threaded call by default
(``bench/thread_timeout.py``: the GCN step at 1 rank x 2 threads 192-194 ms
against 115-122 ms with ``OPENBLAS_THREAD_TIMEOUT=4``). So the library puts ``WAIT_ENV``
into ``os.environ`` only while it loads such a runtime itself (``loading``), where the user
set none, and takes it out again:

- numpy's OpenBLAS (and scipy's), loaded by ``import spmmgnn`` when numpy was not loaded
  yet: a script that imports numpy first keeps OpenBLAS's own default;
- libgomp, loaded when the library starts numba's pool (its first kernel) unless torch
  loaded it before.

What stays is the runtime's setting, for the whole process (the caller's own BLAS and OpenMP
calls included): ``os.environ`` is as the caller left it, and processes the caller starts
inherit nothing. The ``spmmgnn`` command keeps ``WAIT_ENV`` in its environment for its whole
run (``for_process``: its own process, torch's OpenMP, and the processes it starts).
``$SPMMGNN_KEEP_ENV=1`` turns all of this off: the runtimes load with the environment as it
is. The thread counts are a separate matter, set around each library call (``threads``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

WAIT_ENV = {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "0", "KMP_BLOCKTIME": "0",
            "OPENBLAS_THREAD_TIMEOUT": "4"}
KEEP_ENV = "SPMMGNN_KEEP_ENV"
_LOCK = threading.RLock()  # one load at a time changes os.environ


def keep_env() -> bool:
    """``$SPMMGNN_KEEP_ENV`` is 1/true/yes/on: the library sets no runtime variable."""
    return os.environ.get(KEEP_ENV, "").strip().lower() in ("1", "true", "yes", "on")


@contextmanager
def loading() -> Iterator[None]:
    """Inside: ``WAIT_ENV``'s variables that the user did not set are in ``os.environ``, for
    a runtime loading now; removed again on exit (nothing with ``$SPMMGNN_KEEP_ENV=1``)."""
    if keep_env():
        yield
        return
    with _LOCK:
        added = [name for name in WAIT_ENV if name not in os.environ]
        for name in added:
            os.environ[name] = WAIT_ENV[name]
        try:
            yield
        finally:
            for name in added:
                os.environ.pop(name, None)


def for_process() -> None:
    """Set ``WAIT_ENV``'s variables the user did not set for the rest of this process and its
    children: the ``spmmgnn`` command's, whose process is its own (nothing with
    ``$SPMMGNN_KEEP_ENV=1``)."""
    if keep_env():
        return
    for name, value in WAIT_ENV.items():
        os.environ.setdefault(name, value)
