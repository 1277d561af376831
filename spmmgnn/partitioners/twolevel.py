"""Two-level partitioning for node-aware exchanges: the nodes first, then the ranks of each.

With the node-aware exchange (``spmmgnn.exchange.node_exchange``) a row crosses from node A to
node B once per call whatever the number of B's ranks that need it, so the rows that cross
between nodes are the connectivity-1 volume of the *node-level* partition (``part //
parts_per_node``): ``sum over columns c of (number of nodes needing c, owner's included) - 1``.
A flat k-way partition minimizes the rank-level volume and is blind to which parts share a node.
The two-level layout minimizes the node-level volume directly:

1. partition A into ``k / parts_per_node`` parts (the nodes) with the base method;
2. partition each node's induced submatrix ``A[S, S]`` into ``parts_per_node`` parts (its
   ranks) with the same method; part ``node * parts_per_node + local``, so block row p
   lands on rank p and node ``p // parts_per_node`` (``ProcessGrid(ranks_per_node=K)``'s
   consecutive grouping);
3. rebalance the k parts to the load cap on A's full rows (step 2 balanced the
   submatrices, whose rows lack their cut non-zeros).

Method names: ``twolevel:<base>`` with any method ``partition`` takes as ``<base>`` (e.g.
``twolevel:metis-vol``); ``parts_per_node`` is required (k / P per node: the ranks per node
divided by the replication c). ``node_volume`` gives both inter-node volumes of a part
vector; ``bench/node_aware.py`` compares the two layouts on them.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import scipy.sparse as sp

from ..layout import Partition
from ..runtime.errors import SpmmgnnError
from .maxsend import rebalance
from .metrics import metrics
from .model import ColumnNet, as_square_csr, load_cap, row_loads

PREFIX = "twolevel:"


def is_two_level(method) -> bool:
    return str(method).strip().lower().startswith(PREFIX)


def two_level(A, k: int, method: str, parts_per_node: int | None,
              partition: Callable[..., Partition], epsilon: float = 0.03, seed: int = 0,
              row_weight: int = 0, **options) -> Partition:
    """The two-level partition of square ``A`` into k parts (module docstring) with the flat
    ``partition`` (``api.partition``, handed in so this module does not import ``api``,
    which imports it) at both levels; ``options`` go to it."""
    base = str(method).strip().lower()[len(PREFIX):] or "default"
    if (isinstance(parts_per_node, bool) or not isinstance(parts_per_node, (int, np.integer))
            or parts_per_node < 1 or k % parts_per_node):
        raise SpmmgnnError(f"{method}: parts_per_node must be a positive divisor of k={k} "
                           f"(the block rows of one node), got {parts_per_node!r}")
    t0 = time.perf_counter()
    A = as_square_csr(A)
    nodes = k // int(parts_per_node)
    top = partition(A, nodes, method=base, epsilon=epsilon, seed=seed, row_weight=row_weight,
                    **options).parts
    parts = np.empty(A.shape[0], dtype=np.int64)
    for b in range(nodes):
        S = np.flatnonzero(top == b)
        sub = sp.csr_array(A[S][:, S])
        inner = partition(sub, int(parts_per_node), method=base, epsilon=epsilon,
                          seed=seed + b, row_weight=row_weight, **options).parts
        parts[S] = b * int(parts_per_node) + inner
    loads = row_loads(A, row_weight)
    parts = rebalance(ColumnNet.from_matrix(A), loads, parts, k, load_cap(loads, k, epsilon))[0]
    result = Partition.from_parts(parts, k, method=f"{PREFIX}{base}")
    result.metrics = metrics(A, parts, k)
    result.seconds = time.perf_counter() - t0
    return result


def node_volume(A, parts: np.ndarray, parts_per_node: int) -> dict[str, int]:
    """Rows that cross between nodes per SpMM (``parts_per_node`` consecutive parts a node):
    ``flat``, one per (column, part on another node than its owner that needs it), and
    ``node`` (the node-aware exchange), one per (column, other node that needs it)."""
    A = sp.csr_array(A)
    node = np.asarray(parts, dtype=np.int64) // int(parts_per_node)
    rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
    cols = A.indices
    out = {}
    for name, group in (("flat", np.asarray(parts, dtype=np.int64)), ("node", node)):
        far = node[rows] != node[cols]
        key = np.unique(cols[far].astype(np.int64) * (group.max(initial=0) + 1)
                        + group[rows[far]])
        out[name] = int(key.size)
    return out
