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

Measured: on the real graphs of bench/results/partition_real.md it takes 0.01-0.5x
METIS-vol's time. On R-MAT graphs with the row non-zeros as vertex weights (hubs of 10^4-10^5
non-zeros) it is slow and misses the caps: 20 s at 1.7 x 10^6 non-zeros and 244 s at
1.4 x 10^7 (2 threads, a loaded machine), parts up to 8 % above the cap, so the partition is
rebalanced (which builds the column-net hypergraph); with unit weights it takes 1-2 s there.

Above ``contract.COARSEN_ABOVE`` (n x k) KaMinPar partitions a contraction of the graph
instead (``contract``: the isolated vertices set aside, size-constrained label propagation,
one coarse vertex per cluster) and every vertex takes its cluster's part: on R-MAT 2^24 at
k = 64 KaMinPar alone grew past 22 GB; at 2^22, k = 64, the contraction took 137 s at
2.4 GB against 401-653 s at 3.8-8.4 GB, with a 2 % lower total volume and a 25 % lower
maximum send volume (bench/results/large-graph.md).
"""

from __future__ import annotations

import os
import tempfile

import numpy as np
import scipy.sparse as sp

from ..runtime.errors import SpmmgnnError
from . import contract
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
    write_parhip_arrays(G.indptr, G.indices, vweights, path)


def write_parhip_arrays(indptr: np.ndarray, indices: np.ndarray, vweights: np.ndarray,
                        path: str) -> None:
    """``write_parhip`` of the graph's CSR arrays (no scipy matrix: scipy would widen int32
    indices next to int64 pointers)."""
    n, m = indptr.size - 1, int(indptr[-1])
    if n >= _WEIGHT_MAX:
        raise SpmmgnnError(f"KaMinPar's file format here holds < 2^31 vertices, got {n}")
    if vweights.size and int(vweights.max()) > _WEIGHT_MAX:
        raise SpmmgnnError("a vertex weight does not fit 32 bits")
    header = np.array([_NO_EDGE_WEIGHTS | _VID32 | _VWGT32, n, m], dtype=np.uint64)
    start = header.nbytes + 8 * (n + 1)  # where the neighbour lists begin
    with open(path, "wb") as f:
        header.tofile(f)
        (start + 4 * indptr.astype(np.uint64)).astype(np.uint64).tofile(f)
        for lo in range(0, m, 1 << 26):  # bounded temporaries on huge graphs
            indices[lo:lo + (1 << 26)].astype(np.uint32).tofile(f)
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
                   G: sp.csr_array | None = None,
                   coarsen_above: int | None = None) -> np.ndarray:
    """Part vector from KaMinPar into k parts of at most ``cap`` load each, on the symmetrized
    graph of A (``G`` if the caller has it already). When n x k exceeds ``coarsen_above``
    (default ``contract.COARSEN_ABOVE``), KaMinPar partitions a contraction of the graph
    (``contract.coarsened``)."""
    if context not in CONTEXTS:
        raise SpmmgnnError(f"KaMinPar context must be one of {CONTEXTS}, got {context!r}")
    G = symmetric_graph(A) if G is None else G
    w = np.maximum(loads, 1)
    graph = [G.indptr, G.indices]  # (handed over: the callee drops them when done)
    del G
    if contract.coarsened(w.size, k, coarsen_above):
        return _coarse_parts(graph, w, k, cap, seed, threads, context)
    return _run(graph, w, k, cap, seed, threads, context)


def _run(graph: list, w, k: int, cap: int, seed: int, threads: int,
         context: str) -> np.ndarray:
    """KaMinPar on the CSR graph ``graph = [indptr, indices]`` with vertex weights ``w``;
    the list is emptied once the file is written, so that KaMinPar, which holds its own
    copy, partitions with ours freed (where nothing else holds it)."""
    import kaminpar

    fd, path = tempfile.mkstemp(prefix="spmmgnn-kaminpar-", suffix=".parhip")
    os.close(fd)
    try:
        write_parhip_arrays(graph[0], graph[1], w, path)
        graph.clear()
        loaded = kaminpar.load_graph(path, kaminpar.GraphFileFormat.PARHIP)
    finally:
        os.unlink(path)
    kaminpar.reseed(int(seed) & 0x7FFFFFFF)
    try:
        parts = _instance(threads, context).compute_partition(loaded, [int(cap)] * k)
    except Exception as exc:  # KaMinPar reports failures as generic errors
        raise SpmmgnnError(f"KaMinPar failed: {exc}") from None
    return np.asarray(parts, dtype=np.int64)


def _coarse_parts(graph: list, w, k: int, cap: int, seed: int, threads: int,
                  context: str) -> np.ndarray:
    """KaMinPar on the label-propagation contraction of the linked vertices (up to three
    levels, until about ``contract.COARSE_TARGET / k`` clusters), projected back; the
    isolated vertices then fill the parts' room (``contract.fill_isolated``)."""
    cluster = np.arange(w.size, dtype=np.int64)
    cw, (ptr, idx) = w.astype(np.int64), graph
    graph.clear()  # the finer levels go as soon as the next is built
    linked = np.diff(ptr) > 0
    # about COARSE_TARGET / k clusters (at most a quarter of the linked vertices)
    target = max(4 * k, min(contract.COARSE_TARGET // k, int(linked.sum()) // 4))
    # clusters of at most a quarter of a part's room: the parts stay balanceable
    max_weight = max(1, min(cap // 4, 2 * int(w[linked].sum()) // target))
    del linked
    for level in range(3):
        alone = int(np.count_nonzero(np.diff(ptr) == 0))  # no edge: LP leaves them alone
        sub, nc = contract.lp_clusters(ptr, idx, cw, max_weight, seed=seed + level)
        if nc - alone > 0.9 * (ptr.size - 1 - alone):  # no real progress: stop here
            break
        ptr, idx = contract.contract_graph(ptr, idx, sub, nc)
        cw = np.bincount(sub, weights=cw, minlength=nc).astype(np.int64)
        cluster = sub[cluster]
        if np.count_nonzero(np.diff(ptr)) <= 2 * target:
            break
    # clusters without an edge (isolated vertices, components inside one cluster) are left
    # out of KaMinPar and fill the parts' room afterwards, each whole
    keep = np.diff(ptr) > 0
    coarse_parts = np.zeros(ptr.size - 1, dtype=np.int64)
    if keep.any():
        renum = np.cumsum(keep) - 1
        sub_ptr = np.zeros(int(keep.sum()) + 1, dtype=np.int64)
        np.cumsum(np.diff(ptr)[keep], out=sub_ptr[1:])
        coarse = [sub_ptr, renum[idx].astype(np.int32)]
        del idx, sub_ptr, renum
        coarse_parts[keep] = _run(coarse, cw[keep], k, cap, seed, threads, context)
    contract.fill_isolated(coarse_parts, cw, np.flatnonzero(~keep), k, cap)
    parts = coarse_parts[cluster]
    return parts
