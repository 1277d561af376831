"""Persistent collectives (MPI 4's ``MPI_Alltoallv_init`` / ``MPI_Allreduce_init``): the
arguments of a collective that runs again and again on the same buffers are read once, and
each call is ``Start`` + ``Wait``.

Used only where ``available()``: an MPI 4 library. Why: mpi4py reads an ``Ialltoallv``'s
buffers, counts and displacements anew on every call; at P = 2 a 64-row exchange posted that
way took ~3.1 us with its ``Wait`` against ~1.5 us for the same exchange made persistent,
and an 11-number ``Allreduce`` 2.9 against 1.5 us (``/tmp`` micro-benchmark, 2026-11-26,
load 1.6-2.0). A solver's single-column product pays both on every iteration.

The rules that keep this safe:

* The init is a collective: every rank makes it at the same point of its collective
  sequence. The callers decide to make one from what every rank has in common (the plan's
  own pooled buffers, an operator's first validated call), never from one rank's state.
* A request holds its buffers (mpi4py keeps them referenced); ``start`` first completes the
  same request if an earlier start was never waited for (an exception between start and
  wait), so a request is never started twice.
* mpi4py does not free a request it garbage-collects: an ``Owned`` list frees its requests
  when its owner goes (``weakref.finalize``, which also runs at exit, before mpi4py
  finalizes MPI); MPICH otherwise prints a warning per request at exit.
"""

from __future__ import annotations

import weakref

from mpi4py import MPI

from ..runtime.settings import PERSISTENT, persistent_setting

ENV = PERSISTENT  # ``SPMMGNN_PERSISTENT=0`` turns them off (every call posts its collective anew)


def available() -> bool:
    """Whether persistent collectives are used: an MPI 4 library (MPICH 4, Open MPI 5; a
    cluster's MPI 3 has none, and then every call posts its collective anew, as before)
    and an mpi4py that has them, unless ``SPMMGNN_PERSISTENT=0``."""
    if persistent_setting() == "0":
        return False
    return MPI.Get_version() >= (4, 0) and hasattr(MPI.Comm, "Alltoallv_init")


def start(request: MPI.Prequest) -> None:
    """Start ``request`` (after completing it, should an earlier start never have been
    waited for: ``Wait`` on an inactive persistent request returns at once)."""
    request.Wait()
    request.Start()


class Owned:
    """The persistent requests of one owner (a halo route, an operator), freed with it."""

    __slots__ = ("requests", "__weakref__")

    def __init__(self, owner: object):
        self.requests: list[MPI.Prequest] = []
        weakref.finalize(owner, _free, self.requests)

    def free(self) -> None:
        """Free every request now (their owner makes new ones if it posts again)."""
        _free(self.requests)

    def alltoallv(self, comm: MPI.Comm, send_spec: list, recv_spec: list) -> MPI.Prequest:
        """Collective: a persistent ``Alltoallv`` of ``send_spec`` into ``recv_spec``
        (mpi4py buffer specifications)."""
        request = comm.Alltoallv_init(send_spec, recv_spec)
        self.requests.append(request)
        return request

    def allreduce(self, comm: MPI.Comm, send, recv, op: MPI.Op) -> MPI.Prequest:
        """Collective: a persistent ``Allreduce`` of ``send`` into ``recv``."""
        request = comm.Allreduce_init(send, recv, op=op)
        self.requests.append(request)
        return request


def _free(requests: list) -> None:
    """Free every request (not one still in flight: waiting for it could block)."""
    if MPI.Is_finalized():
        return
    for request in requests:
        try:
            if request.Get_status():  # complete or inactive
                request.Wait()
                request.Free()
        except MPI.Exception:
            pass
    requests.clear()
