"""Pieces the MPI test workers share (run as scripts, they import this as a sibling)."""

from __future__ import annotations

from mpi4py import MPI

from spmmgnn import SpmmgnnError


def message(fn, comm: MPI.Comm = MPI.COMM_WORLD) -> list | None:
    """Every rank's SpmmgnnError message from calling ``fn`` (None where none was raised),
    gathered on rank 0 (None elsewhere)."""
    try:
        fn()
        msg = None
    except SpmmgnnError as exc:
        msg = str(exc)
    return comm.gather(msg, root=0)
