"""One error type, and collective agreement on errors so no rank hangs in a collective."""

from __future__ import annotations

from mpi4py import MPI


class SpmmgnnError(Exception):
    """Bad input or a failed collective check; the message is meant for the user."""


def agree(comm: MPI.Comm, error: str | None) -> None:
    """Collective: raise the same SpmmgnnError on every rank if any rank reports an error.

    Each rank passes its own problem (or None). The message of the lowest failing rank is
    raised everywhere, so every rank exits with one readable message instead of hanging in
    the next collective.
    """
    if comm.Get_size() == 1:
        if error is not None:
            raise SpmmgnnError(error)
        return
    failing = comm.allreduce(0 if error is None else 1, op=MPI.SUM)
    if failing == 0:
        return
    first = comm.allreduce(comm.Get_rank() if error is not None else comm.Get_size(), op=MPI.MIN)
    message = comm.bcast(error, root=first)
    suffix = f" (rank {first}" + (f" and {failing - 1} other rank(s))" if failing > 1 else ")")
    raise SpmmgnnError(message + suffix)


def check_on_root(comm: MPI.Comm, root: int, fn) -> object:
    """Run ``fn()`` on root only; a SpmmgnnError/ValueError it raises is raised on every rank.

    Returns fn's result on root, None elsewhere.
    """
    result, error = None, None
    if comm.Get_rank() == root:
        try:
            result = fn()
        except (SpmmgnnError, ValueError, TypeError, OSError) as exc:
            error = str(exc)
    agree(comm, error)
    return result
