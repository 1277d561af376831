"""End the whole MPI job when one rank dies of an unhandled Python exception.

Without this, an exception on one rank (say, a bug in the user's script between two collective
calls) ends that process while the others wait forever in their next collective. Like
``python -m mpi4py``, ``install_abort_hook()`` (``spmmgnn.install_abort_hook``) installs a
``sys.excepthook`` (and a ``threading.excepthook``) that, when the job has more than one rank,
prints the traceback with every line prefixed by ``[rank r]`` and then calls ``MPI_Abort`` so
every rank ends, with a non-zero exit status from ``mpiexec``.

- Who installs it: the ``spmmgnn`` command, for its whole run; a script run under ``mpiexec``
  calls ``spmmgnn.install_abort_hook()`` itself (``import spmmgnn`` leaves the process's
  hooks alone), or is started with ``SPMMGNN_ABORT_ON_EXCEPTION=1`` in its environment, which
  makes ``import spmmgnn`` install them (``install_if_asked``).
- Single-rank runs (and runs where MPI is not initialized or already finalized) are left to the
  previous hooks: nothing changes there. The hook never initializes MPI itself.
- Opt out with the environment variable ``SPMMGNN_ABORT_ON_EXCEPTION=0`` (then
  ``install_abort_hook()`` installs nothing, the command's included), or call
  ``spmmgnn.runtime.abort.uninstall_abort_hook()``.
- The hooks chain: a custom ``sys.excepthook`` installed before spmmgnn is called to print the
  exception (a header naming the rank comes first), then the job is aborted.
- An unhandled exception in a ``threading.Thread`` also aborts (the main thread would otherwise
  carry on and may wait for the dead thread's part of a collective). ``SystemExit`` in a thread
  is ignored, as Python does.
- ``sys.exit(code)`` with a non-zero code that ends the process on one rank aborts the job with
  that code (``python -m mpi4py`` does the same): without it, the other ranks would wait in
  their next collective forever. Python runs no hook for ``SystemExit``, so ``sys.exit`` is
  wrapped to remember the exception, and an ``atexit`` handler (which runs before mpi4py
  finalizes MPI) aborts if that exception was never caught. Not covered: ``raise SystemExit``
  written out, the ``exit()`` builtin, and a ``SystemExit`` caught and re-raised. An exit that
  every rank takes together (the command line's collective errors) calls
  ``collective_exit(code)`` first and ends normally.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import traceback

_builtin_exit = sys.exit

ENV_VAR = "SPMMGNN_ABORT_ON_EXCEPTION"

_previous_hook = None
_previous_thread_hook = None
_original_exit = None
_last_exit: SystemExit | None = None
_collective_code: object = None
_atexit_registered = False


def _enabled_by_env() -> bool:
    return os.environ.get(ENV_VAR, "").strip().lower() not in ("0", "false", "no", "off")


def _asked_by_env() -> bool:
    return os.environ.get(ENV_VAR, "").strip().lower() in ("1", "true", "yes", "on")


def _mpi_world() -> tuple[int, int]:
    """(rank, size) of COMM_WORLD, or (0, 1) when MPI is not usable (never initializes it)."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is None:
        return 0, 1
    try:
        if not mpi.Is_initialized() or mpi.Is_finalized():
            return 0, 1
        return mpi.COMM_WORLD.Get_rank(), mpi.COMM_WORLD.Get_size()
    except Exception:  # a broken MPI state must not hide the user's exception
        return 0, 1


def _report(rank: int, size: int, exc_type, exc, tb, where: str, chained) -> None:
    """Print the exception named by rank; use ``chained`` (a previous hook) if it is custom."""
    name = getattr(exc_type, "__name__", str(exc_type))
    head = (f"[rank {rank}] spmmgnn: unhandled {name} {where}on rank {rank} of {size}; "
            f"aborting the MPI job (set {ENV_VAR}=0 to disable)\n")
    try:
        sys.stdout.flush()
    except Exception:
        pass
    try:
        sys.stderr.write(head)
        if chained is not None:
            chained()
        else:
            lines = "".join(traceback.format_exception(exc_type, exc, tb))
            sys.stderr.write("".join(f"[rank {rank}] {ln}\n" for ln in lines.splitlines()))
        sys.stderr.flush()
    except Exception:
        pass


def _abort(code: int = 1) -> None:
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None:
        mpi.COMM_WORLD.Abort(code)


def _excepthook(exc_type, exc, tb) -> None:
    rank, size = _mpi_world()
    previous = _previous_hook or sys.__excepthook__
    if size <= 1:
        previous(exc_type, exc, tb)
        return
    custom = previous is not sys.__excepthook__
    _report(rank, size, exc_type, exc, tb, "",
            (lambda: previous(exc_type, exc, tb)) if custom else None)
    _abort(1)


def _thread_excepthook(args) -> None:
    rank, size = _mpi_world()
    previous = _previous_thread_hook or threading.__excepthook__
    if size <= 1 or issubclass(args.exc_type, SystemExit):
        previous(args)
        return
    thread = getattr(args.thread, "name", "?")
    custom = previous is not threading.__excepthook__
    _report(rank, size, args.exc_type, args.exc_value, args.exc_traceback,
            f"in thread {thread!r} ", (lambda: previous(args)) if custom else None)
    _abort(1)


def _exit(status=None):
    """``sys.exit`` that remembers its exception for ``_abort_on_exit``."""
    global _last_exit
    exc = SystemExit(status)
    _last_exit = exc
    raise exc


def collective_exit(code) -> None:
    """The process is about to exit with ``code`` on every rank together: no abort."""
    global _collective_code
    _collective_code = code


def _uncaught(exc: SystemExit) -> bool:
    """Did ``exc`` end the interpreter? Python (3.10, 3.11) sets ``__traceback__`` only where
    an ``except`` clause catches; newer versions set it while unwinding, and then the
    outermost frame stopped on the line that raised (a caught one ran its handler)."""
    tb = exc.__traceback__
    if tb is None:
        return True
    frame = tb.tb_frame
    outermost = frame.f_back is None or frame.f_back.f_code.co_filename.endswith("runpy>")
    return outermost and frame.f_lineno == tb.tb_lineno


def _exit_code(code) -> int:
    if code is None:
        return 0
    return code if isinstance(code, int) else 1


def _pending_code() -> int:
    """The status ``_abort_on_exit`` will abort the job with (0: it will not)."""
    exc = _last_exit
    if exc is None or not _uncaught(exc) or exc.code == _collective_code:
        return 0
    return _exit_code(exc.code) if _mpi_world()[1] > 1 else 0


def abort_pending() -> bool:
    """Is the process exiting into an abort of the job (an uncaught non-zero ``sys.exit``
    on one rank of several)? For exit handlers that must not wait on peers then."""
    return _pending_code() != 0


def _abort_on_exit() -> None:
    code = _pending_code()
    if code == 0:
        return
    exc = _last_exit
    rank, size = _mpi_world()
    try:
        sys.stdout.flush()
        sys.stderr.write(f"[rank {rank}] spmmgnn: sys.exit({exc.code!r}) on rank {rank} of "
                         f"{size}; aborting the MPI job with status {code} (set {ENV_VAR}=0 "
                         "to disable)\n")
        sys.stderr.flush()
    except Exception:
        pass
    _abort(code)


def install_abort_hook(force: bool = False) -> bool:
    """Install the hooks (idempotent): from now on an unhandled exception (or a non-zero
    ``sys.exit``) on one rank of several aborts the whole MPI job instead of leaving the
    other ranks waiting in their next collective. Returns whether they are installed.

    Does nothing when ``$SPMMGNN_ABORT_ON_EXCEPTION`` is 0/false/no/off, unless ``force``.
    """
    global _previous_hook, _previous_thread_hook
    if not force and not _enabled_by_env():
        return False
    if sys.excepthook is not _excepthook:
        _previous_hook = sys.excepthook
        sys.excepthook = _excepthook
    if threading.excepthook is not _thread_excepthook:
        _previous_thread_hook = threading.excepthook
        threading.excepthook = _thread_excepthook
    global _original_exit, _atexit_registered
    if sys.exit is not _exit:
        _original_exit = sys.exit
        sys.exit = _exit
    if not _atexit_registered:
        atexit.register(_abort_on_exit)
        _atexit_registered = True
    return True


def install_if_asked() -> bool:
    """``import spmmgnn``'s: install the hooks only when ``$SPMMGNN_ABORT_ON_EXCEPTION`` asks
    for them (1/true/yes/on), for a script that cannot be edited to call
    ``install_abort_hook``. Returns whether they are installed now."""
    return install_abort_hook() if _asked_by_env() else is_installed()


def uninstall_abort_hook() -> None:
    """Restore the hooks that were in place before ``install_abort_hook``."""
    global _previous_hook, _previous_thread_hook
    if sys.excepthook is _excepthook:
        sys.excepthook = _previous_hook or sys.__excepthook__
    if threading.excepthook is _thread_excepthook:
        threading.excepthook = _previous_thread_hook or threading.__excepthook__
    global _original_exit, _last_exit
    if sys.exit is _exit:
        sys.exit = _original_exit or _builtin_exit
    _previous_hook = _previous_thread_hook = _original_exit = _last_exit = None


def is_installed() -> bool:
    return sys.excepthook is _excepthook
