"""MPI worker: a thread's uncaught exception inside a ``spmmgnn`` command ends the job.

Usage: mpiexec -n 2 python fault_cli.py spmm [spmm flags...]
Runs ``spmmgnn.cli.main`` with the ``spmm`` command's ``run`` replaced: on rank 1 a
``threading.Thread`` raises ``RuntimeError("command thread bug on purpose")`` and the rank
then returns without the collective the other ranks enter (``Barrier``). The command's own
handlers see no exception in its main thread; only the abort hook the command installs ends
the job (without it, the other ranks would wait in the barrier forever).
"""

from __future__ import annotations

import sys
import threading

from mpi4py import MPI


def bug() -> None:
    raise RuntimeError("command thread bug on purpose")


def run(args) -> int:
    comm = MPI.COMM_WORLD
    if comm.rank == 1:
        worker = threading.Thread(target=bug, name="worker")
        worker.start()
        worker.join()
        return 0
    comm.Barrier()
    return 0


if __name__ == "__main__":
    from spmmgnn.commands import spmm

    spmm.run = run  # add_parser binds ``run`` when build_parser() is called by main
    from spmmgnn.cli import main

    sys.exit(main(sys.argv[1:]))
