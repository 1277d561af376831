"""spmmgnn: distributed sparsity-aware SpMM over MPI, and full-batch GNN training on it."""

import os

# numba's and torch's OpenMP pools spin-wait against each other when a rank runs more than one
# thread (measured: 186 vs 28 ms per epoch at 2 threads); must be set before torch loads.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from . import krylov  # noqa: E402  (spmmgnn.krylov.cg, .subspace_iteration)
from .abort import install_abort_hook  # noqa: E402
from .algorithms import ALGORITHMS, DistSpMM
from .errors import SpmmgnnError
from .grid import ProcessGrid
from .layout import Partition
from .threads import default_threads, get_threads, set_threads

__version__ = "0.1.0"

install_abort_hook()
__all__ = ["ALGORITHMS", "DistSpMM", "Partition", "ProcessGrid", "SpmmgnnError",
           "default_threads", "get_threads", "krylov", "set_threads"]
