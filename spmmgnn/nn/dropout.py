"""Partition-invariant dropout: the mask of (vertex, feature) is a hash of its global ids.

A torch RNG draws masks in storage order, so the same seed gives different masks for a
different number of ranks, partition or replication. Here the keep/drop decision of entry
``(v, k)`` in layer ``l`` at step ``t`` is a counter-based hash (splitmix64) of
``(seed, t, l, v, k)`` where ``v`` is the vertex id in the source graph. So training is the
same computation whatever the layout: replicas of a block row (1.5D) draw the same masks, and
a single-process reference can reproduce a distributed run exactly.

The models call their grid's backend (``relu_dropout``, ``vertex_dropout``,
``dropout_mask``: the torch backend computes the same hash with torch operations on its
device); the functions here are the host backend's, on CPU tensors and numpy vertex ids
(``backend.dense_host``, kernels in ``local.dense_kernels``).
"""

from __future__ import annotations

from ..backend.dense_host import (  # noqa: F401 (the names of the host dropout)
    BIAS_ROWS,
    ReluDropout,
    dropout_mask,
    relu_dropout,
    stream_key,
    vertex_dropout,
)
