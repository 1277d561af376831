"""spmmgnn: distributed sparsity-aware SpMM over MPI, and full-batch GNN training on it."""

# first: spmmgnn.jit sets the OpenMP wait policy before numba or torch loads an OpenMP pool
# (numba's and torch's pools spin-wait against each other when a rank runs more than one
# thread: 186 against 28 ms per epoch at 2 threads)
from . import jit  # noqa: F401, I001
from .abort import install_abort_hook
from .algorithms import ALGORITHMS, DistSpMM
from .errors import SpmmgnnError
from .grid import ProcessGrid
from .layout import Partition
from .threads import default_threads, get_threads, set_threads

__version__ = "0.1.0"

install_abort_hook()
__all__ = ["ALGORITHMS", "DistSpMM", "Partition", "ProcessGrid", "SpmmgnnError",
           "default_threads", "get_threads", "set_threads"]
