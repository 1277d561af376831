"""One error type, and collective agreement on errors so no rank hangs in a collective.

Two kinds of failure, treated differently:

- **User errors** (bad input, a missing or unreadable file): ``SpmmgnnError``, and ``OSError``
  raised while a step reads the user's files. Made collective with ``agree``; every rank raises
  the same one-line ``SpmmgnnError`` (the command line prints it once and exits with status 2).
  The file loaders turn their parsers' errors (``ValueError`` from numpy/scipy on malformed
  text, ...) into ``SpmmgnnError`` themselves, so a ``ValueError`` or ``TypeError`` that reaches
  ``check_on_root`` is treated as a bug, not as bad input.
- **Programming errors** (any other exception): ``fail_together`` keeps the traceback. The rank
  that failed re-raises its own exception unchanged; every other rank raises ``RankFailed``
  whose message names the failing rank and carries its traceback text, so whichever rank ends
  the job first (the abort hook, or the command line's handler) prints the cause.
"""

from __future__ import annotations

import time
import traceback

from mpi4py import MPI

from .wire import bcast_json


class SpmmgnnError(Exception):
    """Bad input or a failed collective check; the message is meant for the user.

    ``collective`` is True when every rank raised it together (``agree``); a rank that raises
    one on its own leaves the others in their next collective, so the command line aborts then.
    """

    collective = False


def collective_error(message: str) -> SpmmgnnError:
    """An error every rank raises together, for a verdict every rank computed itself from the
    same reduced values (no ``agree`` round needed)."""
    exc = SpmmgnnError(message)
    exc.collective = True
    return exc


class RankFailed(RuntimeError):
    """Another rank hit a programming error in a step all ranks take together."""

    def __init__(self, rank: int, text: str):
        super().__init__(f"rank {rank} failed with {text.rstrip()}")
        self.rank = rank
        self.text = text


def agree(comm: MPI.Comm, error: str | None) -> None:
    """Collective: raise the same SpmmgnnError on every rank if any rank reports an error.

    Each rank passes its own problem (or None). The message of the lowest failing rank is
    raised everywhere, so every rank exits with one readable message instead of hanging in
    the next collective; it names that rank unless every rank reported the same message.
    """
    if comm.Get_size() == 1:
        if error is not None:
            raise collective_error(error)
        return
    failing = comm.allreduce(0 if error is None else 1, op=MPI.SUM)
    if failing == 0:
        return
    first = comm.allreduce(comm.Get_rank() if error is not None else comm.Get_size(), op=MPI.MIN)
    message = bcast_json(comm, error, root=first)
    if failing == comm.Get_size() and comm.allreduce(error == message, op=MPI.LAND):
        raise collective_error(message)  # every rank found the same problem: no rank to name
    suffix = f" (rank {first}" + (f" and {failing - 1} other rank(s))" if failing > 1 else ")")
    raise collective_error(message + suffix)


def fail_together(comm: MPI.Comm, exc: BaseException | None) -> None:
    """Collective: if any rank passes an exception (a bug), every rank raises.

    The lowest failing rank's traceback is sent to all; a failing rank re-raises its own
    exception (traceback intact), the others raise ``RankFailed(rank, traceback_text)``.
    """
    if comm.Get_size() == 1:
        if exc is not None:
            raise exc
        return
    rank, size = comm.Get_rank(), comm.Get_size()
    first = comm.allreduce(rank if exc is not None else size, op=MPI.MIN)
    if first == size:
        return
    text = None
    if rank == first:
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    text = bcast_json(comm, text, root=first)
    if exc is not None:
        raise exc
    raise RankFailed(first, text)


# the longest sleep between two polls of a rank waiting for root (seconds): the wait ends at
# most this late; the first polls come after 0.1 ms, doubling
POLL_MAX = 0.05


def wait_for_root(comm: MPI.Comm) -> None:
    """Collective: return once every rank has called it, without spinning. MPICH busy-polls
    inside a blocking collective, so ranks that wait for root's work (reading a graph,
    partitioning it) would each take a core from it (measured: a partition 48.5 s inside a
    2-rank run against 40.7 s alone). Here each rank posts a non-blocking barrier and waits
    for it in ``wait_quietly``."""
    if comm.Get_size() == 1:
        return
    wait_quietly(comm.Ibarrier())


def wait_quietly(*requests: MPI.Request) -> None:
    """Complete non-blocking ``requests`` (a message from root, a barrier) without spinning:
    poll with a sleep that doubles from 0.1 ms to ``POLL_MAX`` (a blocking wait would
    busy-poll in MPICH and take a core from the rank doing the work)."""
    delay = 1e-4
    while not MPI.Request.Testall(list(requests)):
        time.sleep(delay)
        delay = min(2 * delay, POLL_MAX)


def check_on_root(comm: MPI.Comm, root: int, fn) -> object:
    """Run ``fn()`` on root only and make its failure collective. Returns fn's result on root,
    None elsewhere. The other ranks wait in ``wait_for_root`` (sleeping, not spinning).

    A ``SpmmgnnError`` or ``OSError`` (user error) becomes the same one-line SpmmgnnError on
    every rank. Any other exception is a bug: root re-raises it with its traceback and the
    other ranks raise ``RankFailed`` carrying that traceback (see the module docstring).
    """
    result, error, crash = None, None, None
    if comm.Get_rank() == root:
        try:
            result = fn()
        except SpmmgnnError as exc:
            error = str(exc)
        except OSError as exc:
            if isinstance(exc, BrokenPipeError) and comm.Get_size() == 1:
                raise  # stdout closed by its reader (| head): the command line ends quietly
            error = f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # a bug: keep it, with its traceback, for fail_together
            crash = exc
    wait_for_root(comm)
    fail_together(comm, crash)
    agree(comm, error)
    return result
