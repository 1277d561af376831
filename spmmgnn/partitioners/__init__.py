"""Partitioners of the rows of A into block rows, and the communication metrics they optimize."""

from .metrics import PartitionMetrics, metrics

__all__ = ["PartitionMetrics", "metrics"]
