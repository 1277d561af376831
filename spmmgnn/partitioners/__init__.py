"""Partitioners of the rows of A into block rows, and the communication metrics they optimize.

``partition(A, k, method=...)`` is the entry point; ``METHODS`` lists the method names.
"""

from ..layout import Partition
from .api import (
    BASE_METHODS,
    CONTIGUOUS,
    DEFAULT_METHOD,
    METHODS,
    QUALITY_METHOD,
    parse_method,
    partition,
)
from .maxsend import rebalance, refine_max_send
from .metrics import PartitionMetrics, cut_pairs, imbalance, metrics
from .model import ColumnNet, load_cap

__all__ = ["BASE_METHODS", "CONTIGUOUS", "DEFAULT_METHOD", "METHODS", "QUALITY_METHOD",
           "ColumnNet", "Partition", "PartitionMetrics", "cut_pairs", "imbalance", "load_cap",
           "metrics", "parse_method", "partition", "rebalance", "refine_max_send"]
