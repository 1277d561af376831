"""The coarsening level in front of KaMinPar (issue 47: graphs too large for KaMinPar alone):
label propagation under a weight cap, the contraction against scipy's, the isolated
vertices' placement, and ``partition(..., "kaminpar")`` through the contraction."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from spmmgnn.data.generators import rmat
from spmmgnn.partitioners import contract, partition
from spmmgnn.partitioners.model import load_cap, row_loads, symmetric_graph


def _graph(seed: int = 3) -> sp.csr_array:
    """A directed R-MAT graph with isolated vertices and hubs, and a few extra isolated ones."""
    A = sp.csr_array(rmat(12, 6, seed=seed, symmetric=False, permute=True))
    n = A.shape[0] + 50  # 50 vertices without any edge at the end
    return sp.csr_array((A.data, A.indices, np.r_[A.indptr, [A.indptr[-1]] * 50]),
                        shape=(n, n))


def test_label_propagation_keeps_every_cluster_under_the_cap():
    A = _graph()
    G = symmetric_graph(A)
    w = np.maximum(row_loads(A), 1)
    cluster, nc = contract.lp_clusters(G.indptr, G.indices, w, 40, seed=1)
    assert cluster.shape == (A.shape[0],) and nc == cluster.max() + 1
    assert set(np.unique(cluster)) == set(range(nc))
    weight = np.bincount(cluster, weights=w, minlength=nc)
    alone = np.bincount(cluster, minlength=nc) == 1
    assert (weight[~alone] <= 40).all()  # a cluster of several stays under the cap
    assert nc < 0.8 * A.shape[0]  # and it does contract
    isolated = np.flatnonzero(np.diff(G.indptr) == 0)
    assert alone[cluster[isolated]].all()  # a vertex without a neighbour stays alone
    again, _ = contract.lp_clusters(G.indptr, G.indices, w, 40, seed=1)
    assert np.array_equal(again, cluster)  # the seed fixes the result


def test_contraction_is_the_pattern_of_p_transpose_g_p():
    A = _graph(5)
    G = symmetric_graph(A)
    cluster, nc = contract.lp_clusters(G.indptr, G.indices, np.maximum(row_loads(A), 1), 25)
    ptr, idx = contract.contract_graph(G.indptr, G.indices, cluster, nc)
    P = sp.csr_array((np.ones(cluster.size), (np.arange(cluster.size), cluster)),
                     shape=(cluster.size, nc))
    want = (P.T @ G.astype(np.float64) @ P).tocsr()
    want.setdiag(0)
    want.eliminate_zeros()
    want.sort_indices()
    assert ptr.dtype == np.int64 and idx.dtype == np.int32
    assert np.array_equal(ptr, want.indptr) and np.array_equal(idx, want.indices)


def test_isolated_vertices_fill_the_room_under_the_cap():
    parts = np.array([0, 0, 1, -1, -1, -1, -1, -1])
    loads = np.array([5, 3, 2, 1, 2, 3, 1, 1])
    isolated = np.arange(3, 8)
    contract.fill_isolated(parts, loads, isolated, 3, 8)
    part_load = np.bincount(parts, weights=loads, minlength=3)
    assert ((0 <= parts) & (parts < 3)).all() and (part_load <= 8).all()
    full = np.array([0, 1, -1, -1, -1])  # no room left anywhere: still every vertex placed
    contract.fill_isolated(full, np.array([4, 4, 1, 1, 1]), np.arange(2, 5), 2, 4)
    assert ((0 <= full) & (full < 2)).all()


@pytest.mark.parametrize("k", [4, 16])
def test_partition_through_the_contraction(monkeypatch, k):
    """``kaminpar`` with the contraction forced (COARSEN_ABOVE 0): a partition of every
    vertex into k parts, each under the load cap after the rebalance, with a volume close
    to KaMinPar's on the whole graph (same seed, one thread)."""
    A = _graph(7)
    direct = partition(A, k, method="kaminpar", threads=1)
    monkeypatch.setattr(contract, "COARSEN_ABOVE", 0)
    calls = []
    real = contract.contract_graph
    monkeypatch.setattr(contract, "contract_graph",
                        lambda *a: calls.append(a[3]) or real(*a))
    P = partition(A, k, method="kaminpar", threads=1)
    assert calls, "the contraction did not run"
    loads = row_loads(A)
    part_load = np.bincount(P.parts, weights=loads, minlength=k)
    assert P.parts.shape == (A.shape[0],) and set(np.unique(P.parts)) <= set(range(k))
    assert part_load.max() <= load_cap(loads, k, 0.03)
    assert P.metrics.total_volume <= 1.5 * direct.metrics.total_volume
