"""spmmgnn: distributed sparsity-aware SpMM over MPI, and full-batch GNN training on it."""

from .dist import ALGORITHMS, DistSpMM
from .errors import SpmmgnnError
from .grid import ProcessGrid
from .layout import Partition
from .threads import default_threads, get_threads, set_threads

__version__ = "0.1.0"
__all__ = ["ALGORITHMS", "DistSpMM", "Partition", "ProcessGrid", "SpmmgnnError",
           "default_threads", "get_threads", "set_threads"]
