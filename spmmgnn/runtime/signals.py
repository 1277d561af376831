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
  default handler.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

SIGNALS = (signal.SIGINT, signal.SIGTERM)

_pending: int | None = None
_deferred = 0
_installed = False
_previous_hook = None


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
    """Handle SIGINT and SIGTERM here (main thread only); returns the previous handlers,
    for ``uninstall``."""
    global _pending, _installed, _previous_hook
    _pending, _installed = None, True
    if _previous_hook is None:
        _previous_hook, sys.unraisablehook = sys.unraisablehook, _unraisable
    return {s: signal.signal(s, _handler) for s in SIGNALS}


def uninstall(previous: dict) -> None:
    global _pending, _installed, _previous_hook
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
