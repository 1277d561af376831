"""spmmgnn: distributed sparsity-aware SpMM over MPI, and full-batch GNN training on it."""

import os
import sys


def _launcher_mismatch() -> str | None:
    """Open MPI's ``mpiexec`` started this process (it sets ``OMPI_COMM_WORLD_SIZE``) but
    mpi4py runs on the ``mpich`` wheel's MPICH, which cannot join that job (it crashes in
    ``MPI_Init``): the line saying what to run instead, found before MPI starts."""
    import importlib.metadata

    if "OMPI_COMM_WORLD_SIZE" not in os.environ or os.environ.get("MPI4PY_MPIABI"):
        return None
    try:
        importlib.metadata.distribution("mpich")
    except importlib.metadata.PackageNotFoundError:
        return None  # mpi4py built against the system MPI: Open MPI's launcher is its own
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return ("spmmgnn: error: started by Open MPI's mpiexec, but this environment's mpi4py "
            "runs on the mpich wheel's MPICH, which cannot join an Open MPI job; run this "
            f"environment's own launcher: {mpiexec} -n P spmmgnn ... (or build mpi4py "
            "against Open MPI: pip install --no-binary mpi4py mpi4py, without the mpich "
            "extra)")


if (_mismatch := _launcher_mismatch()) is not None:  # every rank finds it; rank 0 says it
    if os.environ.get("OMPI_COMM_WORLD_RANK", "0") == "0":
        print(_mismatch, file=sys.stderr, flush=True)
    raise SystemExit(2)

# numpy's (and scipy's) OpenBLAS read their idle-thread timeout as they load: loaded here,
# they get the library's (spmmgnn.runtime.thread_env), and os.environ is put back as it was
from .runtime.thread_env import loading  # noqa: E402, I001

with loading():
    # spmmgnn.runtime.jit sets the OpenMP wait policy before numba or torch loads a pool
    from .runtime import jit  # noqa: F401, I001
    from . import krylov  # (spmmgnn.krylov.cg, .subspace_iteration)
    from .algorithms import ALGORITHMS, DistSpMM
    from .grid import ProcessGrid
    from .layout import Partition
    from .runtime.abort import install_abort_hook, install_if_asked
    from .runtime.errors import SpmmgnnError
    from .runtime.threads import default_threads, get_threads, set_threads

__version__ = "0.1.0"

install_if_asked()  # only with $SPMMGNN_ABORT_ON_EXCEPTION=1: see spmmgnn.runtime.abort
__all__ = ["ALGORITHMS", "DistSpMM", "Partition", "ProcessGrid", "SpmmgnnError",
           "default_threads", "get_threads", "install_abort_hook", "krylov", "set_threads"]
