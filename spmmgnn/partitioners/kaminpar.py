"""KaMinPar (deep multilevel graph partitioning, shared-memory parallel) on the symmetrized graph.

Like METIS, KaMinPar partitions undirected graphs and minimizes the edge cut, so a
non-symmetric A is symmetrized (``model.symmetric_graph``) and only the refinement sees the
exact volume. Vertex weights are the row non-zeros (at least 1), edges unweighted. Every part
gets the load cap of ``model.load_cap`` as its maximum weight, so KaMinPar balances exactly as
the other partitioners do.

The Python bindings (PyPI ``kaminpar``) build a graph only from a file, so the graph is written
in the binary ParHiP format (24-byte header of version, n and m; byte offsets; 32-bit
neighbours; 32-bit vertex weights) to a temporary file and read back by KaMinPar. That is a
sequential write of O(n + nnz) bytes (0.7 s for 1.4 x 10^7 non-zeros), and KaMinPar then
holds the graph in its own compact form.

Measured (issue 39): on the real graphs of bench/results/partition_real.md it takes 0.01-0.5x
METIS-vol's time. On R-MAT graphs with the row non-zeros as vertex weights (hubs of 10^4-10^5
non-zeros) it is slow and misses the caps: 20 s at 1.7 x 10^6 non-zeros and 244 s at
1.4 x 10^7 (2 threads, a loaded machine), parts up to 8 % above the cap, so the partition is
rebalanced (which builds the column-net hypergraph); with unit weights it takes 1-2 s there.
"""

from __future__ import annotations

import os
import tempfile

import numpy as np
import scipy.sparse as sp

from ..errors import SpmmgnnError
from .model import symmetric_graph

# KaMinPar's configurations (``kaminpar.context_names()``); ``default`` unless measured otherwise
CONTEXTS = ("default", "fast", "eco", "strong", "largek", "largek-fast", "terapart")
# ParHiP version bits, LSB first: no edge weights, no vertex weights, 32-bit edge ids,
# 32-bit vertex ids, 32-bit vertex weights, 32-bit edge weights (set = true)
_NO_EDGE_WEIGHTS, _VID32, _VWGT32 = 1, 8, 16
_WEIGHT_MAX = np.iinfo(np.int32).max


def write_parhip(G: sp.csr_array, vweights: np.ndarray, path: str) -> None:
    """Write the symmetric graph ``G`` (CSR, no diagonal) and its vertex weights as a binary
    ParHiP file: 64-bit byte offsets, 32-bit neighbour ids and 32-bit vertex weights."""
    n, m = G.shape[0], int(G.indptr[-1])
    if n >= _WEIGHT_MAX:
        raise SpmmgnnError(f"KaMinPar's file format here holds < 2^31 vertices, got {n}")
    if vweights.size and int(vweights.max()) > _WEIGHT_MAX:
        raise SpmmgnnError("a vertex weight does not fit 32 bits")
    header = np.array([_NO_EDGE_WEIGHTS | _VID32 | _VWGT32, n, m], dtype=np.uint64)
    start = header.nbytes + 8 * (n + 1)  # where the neighbour lists begin
    with open(path, "wb") as f:
        header.tofile(f)
        (start + 4 * G.indptr.astype(np.uint64)).astype(np.uint64).tofile(f)
        for lo in range(0, m, 1 << 26):  # bounded temporaries on huge graphs
            G.indices[lo:lo + (1 << 26)].astype(np.uint32).tofile(f)
        vweights.astype(np.uint32).tofile(f)


_INSTANCES: dict[tuple[int, str], object] = {}


def _instance(threads: int, context: str):
    """One KaMinPar object per (threads, context): it owns its thread pool."""
    import kaminpar

    key = (int(threads), context)
    if key not in _INSTANCES:
        _INSTANCES[key] = kaminpar.KaMinPar(int(threads), kaminpar.context_by_name(context))
    return _INSTANCES[key]


def kaminpar_parts(A: sp.csr_array, k: int, loads: np.ndarray, cap: int, seed: int = 0,
                   threads: int = 1, context: str = "default",
                   G: sp.csr_array | None = None) -> np.ndarray:
    """Part vector from KaMinPar into k parts of at most ``cap`` load each, on the symmetrized
    graph of A (``G`` if the caller has it already)."""
    import kaminpar

    if context not in CONTEXTS:
        raise SpmmgnnError(f"KaMinPar context must be one of {CONTEXTS}, got {context!r}")
    G = symmetric_graph(A) if G is None else G
    fd, path = tempfile.mkstemp(prefix="spmmgnn-kaminpar-", suffix=".parhip")
    os.close(fd)
    try:
        write_parhip(G, np.maximum(loads, 1), path)
        del G  # KaMinPar holds its own copy: ours is freed before it partitions (if ours)
        graph = kaminpar.load_graph(path, kaminpar.GraphFileFormat.PARHIP)
    finally:
        os.unlink(path)
    kaminpar.reseed(int(seed) & 0x7FFFFFFF)
    try:
        parts = _instance(threads, context).compute_partition(graph, [int(cap)] * k)
    except Exception as exc:  # KaMinPar reports failures as generic errors
        raise SpmmgnnError(f"KaMinPar failed: {exc}") from None
    return np.asarray(parts, dtype=np.int64)
