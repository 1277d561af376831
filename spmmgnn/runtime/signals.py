"""SIGINT and SIGTERM as exceptions that no write can swallow.

Python runs a signal handler between two bytecodes of the main thread. When that bytecode
belongs to a finalizer (a weakref callback, ``__del__``) or to a callback that C code made
(HDF5 calling the file object of ``atomic.SinkFile``), the exception the handler raises is
printed as "Exception ignored" and the work goes on: ``spmmgnn datasets`` once finished its
write and exited 0 after a SIGTERM. So the handler also remembers the signal:

- ``install()`` (done by ``spmmgnn.cli.main``): SIGTERM raises ``Terminated``, SIGINT
  ``KeyboardInterrupt``, and either is remembered (``pending()``). Python's "Exception
  ignored" report of such a swallowed exception (a traceback on stderr: CI once saw one
  from numba's object-cache callback) is silenced while installed, since the command ends
  with its own one line; every other unraisable exception is reported as before;
- ``check()`` raises the remembered signal's exception: ``atomic.atomic_path`` calls it
  before it replaces a target (a swallowed signal never commits a file) and the command line
  after a command returns (exit 143 / 130, not 0);
- ``deferred()``: inside it the handler only remembers (for code that must not be cut,
  such as HDF5 closing a file); leaving it raises the remembered signal. Outside ``install``
  (library use), it handles SIGINT the same way for its duration when SIGINT has Python's
  default handler;
- the ``Watchdog`` (started by ``install``): Python runs the handler only when the main
  thread returns to the interpreter, and a rank blocked in an MPI call that never returns
  (ranks in different collectives) never does: ``timeout 90 mpiexec ...`` once left ranks
  spinning for minutes after its SIGTERM. The signal also wakes the watchdog thread
  (``signal.set_wakeup_fd``); if the process still runs ``GRACE`` seconds later (a second
  signal: at once), it prints one line and calls ``MPI_Abort``, and the process ends
  ``LAST_RESORT`` seconds after that whatever the abort does. It also ends a rank of a
  multi-rank job whose parent process (the launcher's proxy) is gone: such ranks once spun
  for 37 minutes.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from .abort import _mpi_world as mpi_world

SIGNALS = (signal.SIGINT, signal.SIGTERM)
GRACE = 3.0  # seconds the main thread has to end the process after SIGINT / SIGTERM
REPEAT = 1.0  # a signal this long after the first one aborts at once
LAST_RESORT = 3.0  # seconds MPI_Abort has before the process exits by itself
PARENT_POLL = 1.0  # seconds between two looks at the parent process

_pending: int | None = None
_deferred = 0
_installed = False
_previous_hook = None
_watchdog: Watchdog | None = None


class Terminated(BaseException):
    """Raised in the main thread by SIGTERM (a BaseException, like KeyboardInterrupt, so
    ``except Exception`` blocks do not swallow it)."""


def _exception(signum: int) -> BaseException:
    return KeyboardInterrupt() if signum == signal.SIGINT else Terminated()


def _handler(signum, frame) -> None:
    global _pending
    _pending = signum
    if not _deferred:
        raise _exception(signum)


def install() -> dict:
    """Handle SIGINT and SIGTERM here (main thread only) and start the ``Watchdog``;
    returns the previous handlers, for ``uninstall``."""
    global _pending, _installed, _previous_hook, _watchdog
    _pending, _installed = None, True
    if _previous_hook is None:
        _previous_hook, sys.unraisablehook = sys.unraisablehook, _unraisable
    previous = {s: signal.signal(s, _handler) for s in SIGNALS}
    if _watchdog is None:
        _watchdog = Watchdog()
    return previous


def uninstall(previous: dict) -> None:
    global _pending, _installed, _previous_hook, _watchdog
    if _watchdog is not None:
        _watchdog.stop()
        _watchdog = None
    _restore(previous)
    if _previous_hook is not None:
        sys.unraisablehook, _previous_hook = _previous_hook, None
    _pending, _installed = None, False


def _unraisable(info) -> None:
    """Drop the report of our own signal exception swallowed by a callback or finalizer
    (remembered in ``_pending``, raised again by ``check``); pass on everything else."""
    if _pending is not None and isinstance(info.exc_value, (Terminated, KeyboardInterrupt)):
        return
    (_previous_hook or sys.__unraisablehook__)(info)


def _restore(previous: dict) -> None:
    for s, h in previous.items():
        signal.signal(s, h)


def pending() -> int | None:
    """The signal received since ``install`` (or inside ``deferred``), or None."""
    return _pending


def check() -> None:
    """Raise the exception of a signal received since ``install`` (even if it was
    swallowed where it was first raised). Outside ``install`` the signal is forgotten once
    raised (the library's caller handles it from there)."""
    global _pending
    if _pending is None:
        return
    signum = _pending
    if not _installed:
        _pending = None
    raise _exception(signum)


@contextmanager
def deferred() -> Iterator[None]:
    """A signal received inside is raised when the block ends (or ``pending()`` is asked)."""
    global _deferred
    borrowed = {}
    if threading.current_thread() is threading.main_thread():
        borrowed = {s: signal.signal(s, _handler) for s in SIGNALS
                    if signal.getsignal(s) is signal.default_int_handler}
    _deferred += 1
    try:
        yield
    finally:
        _deferred -= 1
        _restore(borrowed)
        if not _deferred:
            check()


class Watchdog:
    """A thread that ends the process when its main thread cannot (module docstring):
    ``GRACE`` seconds after SIGINT or SIGTERM, at once after a second one, or when the
    parent of a rank of a multi-rank job is gone. Main thread only (``set_wakeup_fd``)."""

    def __init__(self, grace: float = GRACE):
        self.grace = grace
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.write_fd, False)
        self.previous_fd = signal.set_wakeup_fd(self.write_fd, warn_on_full_buffer=False)
        self.parent = os.getppid()
        self.stopped = False
        self.thread = threading.Thread(target=self._watch, name="spmmgnn-watchdog",
                                       daemon=True)
        self.thread.start()

    def stop(self) -> None:
        """Stop watching (the command ended) and give the wakeup fd back."""
        signal.set_wakeup_fd(self.previous_fd)
        self.stopped = True
        try:
            os.write(self.write_fd, b"\0")  # (no signal has number 0: it only wakes)
        except OSError:
            pass
        self.thread.join(timeout=2 * PARENT_POLL)
        if not self.thread.is_alive():
            os.close(self.read_fd)
            os.close(self.write_fd)

    def _watch(self) -> None:
        first = signum = None
        while not self.stopped:
            wait = PARENT_POLL if first is None else first + self.grace - time.monotonic()
            ready, _, _ = select.select([self.read_fd], [], [], max(0.0, wait))
            if self.stopped:
                return
            now = time.monotonic()
            for got in os.read(self.read_fd, 64) if ready else b"":
                if got not in SIGNALS:
                    continue
                if first is None:
                    first, signum = now, got
                elif now - first >= REPEAT:  # (one Ctrl-C may reach a forked child too)
                    self._abort(got, "arrived again")
            if first is not None and now - first >= self.grace:
                self._abort(signum, f"was not answered within {self.grace:g} s (the rank "
                                    "is blocked, e.g. in an MPI call another rank never "
                                    "makes)")
            if first is None and os.getppid() != self.parent and mpi_world()[1] > 1:
                rank, size = mpi_world()
                _say(f"spmmgnn: rank {rank} of {size}: the launcher's process {self.parent} "
                     "is gone; ending this rank")
                os._exit(1)

    @staticmethod
    def _abort(signum: int, why: str) -> None:
        """One line, then ``MPI_Abort`` (the process's exit without MPI), with 130 / 143;
        the process exits ``LAST_RESORT`` seconds later should the abort not end it."""
        code = 130 if signum == signal.SIGINT else 143
        rank, size = mpi_world()
        _say(f"spmmgnn: rank {rank} of {size}: {signal.Signals(signum).name} {why}; "
             f"aborting the job with status {code}")
        last = threading.Timer(LAST_RESORT, os._exit, (code,))
        last.daemon = True
        last.start()
        if size > 1:  # (mpi_world: MPI is initialized and not finalized)
            sys.modules["mpi4py.MPI"].COMM_WORLD.Abort(code)
        os._exit(code)


def _say(line: str) -> None:
    """Write one line to stderr without Python's buffered stream (the blocked main thread
    may hold its lock)."""
    try:
        os.write(2, (line + "\n").encode())
    except OSError:
        pass
