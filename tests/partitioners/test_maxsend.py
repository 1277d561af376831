"""The max-send refinement (``partitioners.maxsend``): load cap kept, objective not raised,
checked against brute-force metrics of the matrix and the part vector."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from spmmgnn.data.generators import banded, random_graph, rmat, sbm
from spmmgnn.partitioners.maxsend import MaxSendOptions, rebalance, refine_max_send
from spmmgnn.partitioners.model import ColumnNet, load_cap, row_loads
from spmmgnn.partitioners.simple import random_parts

from ..brute import brute_metrics

GRAPHS = {
    "random": lambda: random_graph(400, 6, seed=1),
    "undirected": lambda: random_graph(300, 4, seed=2, directed=False),
    "banded": lambda: banded(500, 6, 25, seed=3),
    "rmat": lambda: rmat(9, 6, seed=4),
    "sbm": lambda: sbm(400, 8, 10.0, 0.3, seed=5),
}


def _empty_rows(A: sp.csr_array, count: int, seed: int) -> sp.csr_array:
    """A with ``count`` random rows emptied (vertices of load 0)."""
    keep = np.ones(A.shape[0])
    keep[np.random.default_rng(seed).choice(A.shape[0], count, replace=False)] = 0
    A = sp.csr_array(sp.diags_array(keep) @ A)
    A.eliminate_zeros()
    return A


def _objective(A, parts, k):
    """(max send + total / k, max send, total, max load), counted from the definitions."""
    total, send, _, nnz = brute_metrics(A, parts, k)
    return int(send.max()) + total / k, int(send.max()), total, int(nnz.max())


@pytest.mark.parametrize("k", [2, 5, 16])
@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_refinement_keeps_cap_and_lowers_objective(name, k):
    A = sp.csr_array(GRAPHS[name]())
    if name == "random":
        A = _empty_rows(A, 20, k)
    loads, cn = row_loads(A), ColumnNet.from_matrix(A)
    cap = load_cap(loads, k, 0.03)
    start, ok = rebalance(cn, loads, random_parts(loads, k, cap, seed=k), k, cap)
    score0, send0, total0, load0 = _objective(A, start, k)
    assert ok and load0 <= cap  # a balanced input
    given = start.copy()
    parts, report = refine_max_send(cn, loads, start, k, cap, seed=k)
    score, send, total, load = _objective(A, parts, k)
    assert load <= cap
    assert score <= score0 and send <= send0
    assert (report["start"]["max_send"], report["start"]["total"]) == (send0, total0)
    assert (report["end"]["max_send"], report["end"]["total"]) == (send, total)
    assert report["balanced"]
    np.testing.assert_array_equal(start, given)  # the input is not modified


@pytest.mark.parametrize("k", [3, 8])
def test_variants_keep_cap_and_lower_objective(k):
    """Tighter phase-1 cap, max-send selection, a single weight, the large-graph preset."""
    A = sp.csr_array(rmat(9, 8, seed=k))
    loads, cn = row_loads(A), ColumnNet.from_matrix(A)
    cap = load_cap(loads, k, 0.05)
    start, ok = rebalance(cn, loads, random_parts(loads, k, cap, seed=1), k, cap)
    score0, send0, total0, load0 = _objective(A, start, k)
    assert ok and load0 <= cap
    for options in (dict(volume_cap=int(cap * 0.98)), dict(select="max_send"),
                    dict(mu=0.5, fm_passes=2), dict(mu=(0.02, 0.1, 0.4, 1.0), lp_rounds=1,
                                                     fm_passes=0, mu_fm_passes=0,
                                                     total_lp_rounds=0)):
        parts, _ = refine_max_send(cn, loads, start, k, cap, **options)
        score, send, total, load = _objective(A, parts, k)
        assert load <= cap, options
        assert send <= send0, options
        if options.get("select") == "max_send":
            assert (send, total) <= (send0, total0)
        else:
            assert score <= score0, options


def test_total_volume_mode_lowers_total():
    """``mu = 0``: a plain total-volume refinement; the total never rises."""
    A = sp.csr_array(banded(600, 5, 30, seed=7))
    loads, cn, k = row_loads(A), ColumnNet.from_matrix(A), 6
    cap = load_cap(loads, k, 0.03)
    start = random_parts(loads, k, cap, seed=0)
    parts, _ = refine_max_send(cn, loads, start, k, cap, mu=0.0)
    _, _, total, load = _objective(A, parts, k)
    assert load <= cap and total <= _objective(A, start, k)[2]


@pytest.mark.parametrize("k", [2, 7, 20])
def test_rebalance_reaches_cap(k):
    A = sp.csr_array(random_graph(500, 5, seed=k))
    loads, cn = row_loads(A), ColumnNet.from_matrix(A)
    cap = load_cap(loads, k, 0.03)
    rng = np.random.default_rng(k)
    skew = np.minimum(rng.integers(0, k, 500), rng.integers(0, k, 500))  # part 0 overloaded
    assert _objective(A, skew, k)[3] > cap
    parts, ok = rebalance(cn, loads, skew, k, cap)
    assert ok and _objective(A, parts, k)[3] <= cap
    balanced = random_parts(loads, k, cap, seed=0)
    assert rebalance(cn, loads, balanced, k, cap)[0] is balanced  # a no-op


def test_rebalance_moves_a_heavy_vertex_when_light_ones_cannot_fix_a_part():
    """Light vertices move first (``driver.LIGHT`` x the mean load); a part holding only
    heavy vertices is still brought under the cap by the second, unrestricted pass."""
    n = 100
    A = sp.lil_array((n, n))
    A[0, 2:92] = A[1, 4:94] = 1.0  # two hubs of 90 non-zeros each
    for r in range(2, 6):  # four light rows; the rest are empty (load 0: never moved)
        A[r, r + 10] = 1.0
    A = sp.csr_array(A)
    loads, cn = row_loads(A), ColumnNet.from_matrix(A)
    assert loads[:2].min() > 8 * np.ceil(loads.mean())
    parts = np.ones(n, dtype=np.int64)
    parts[:2] = 0  # part 0: only the two hubs, far above the cap
    cap = load_cap(loads, 2, 0.03)
    assert np.bincount(parts, weights=loads)[0] > cap
    out, ok = rebalance(cn, loads, parts, 2, cap)
    assert ok and np.bincount(out, weights=loads, minlength=2).max() <= cap
    assert np.count_nonzero(out[:2] == 1) == 1 and np.all(out[2:] == 1)


def test_options_object_equals_keywords():
    A = sp.csr_array(sbm(300, 6, 8.0, 0.3, seed=1))
    loads, cn, k = row_loads(A), ColumnNet.from_matrix(A), 4
    cap = load_cap(loads, k, 0.03)
    start = random_parts(loads, k, cap, seed=2)
    by_keywords, r1 = refine_max_send(cn, loads, start, k, cap, lp_rounds=3, seed=5)
    options = MaxSendOptions(lp_rounds=3, seed=5)
    by_options, r2 = refine_max_send(cn, loads, start, k, cap, options)
    np.testing.assert_array_equal(by_keywords, by_options)
    assert r1["end"] == r2["end"]
    overridden, _ = refine_max_send(cn, loads, start, k, cap, MaxSendOptions(seed=5),
                                    lp_rounds=3)
    np.testing.assert_array_equal(by_keywords, overridden)
    with pytest.raises(ValueError, match="select"):
        MaxSendOptions(select="best")
    with pytest.raises(TypeError):
        refine_max_send(cn, loads, start, k, cap, no_such_option=1)


def test_total_limit_bounds_the_returned_total():
    """``total_limit`` (rows): no returned state has a larger total volume. On this graph
    phase 2 trades total volume for max send; with the limit at the total-volume phase's
    own total the refinement keeps the total there and still lowers the max send."""
    from spmmgnn.partitioners.metis import metis_parts

    A = sp.csr_array(rmat(10, 8, seed=3))
    loads, cn, k = row_loads(A), ColumnNet.from_matrix(A), 8
    cap = load_cap(loads, k, 0.03)
    start = metis_parts(A, k, loads, 0.03, 0, objective="vol")
    _, send0, _, _ = _objective(A, start, k)
    limit = _objective(A, refine_max_send(cn, loads, start, k, cap, mu=0.0)[0], k)[2]
    free, _ = refine_max_send(cn, loads, start, k, cap)
    assert _objective(A, free, k)[2] > limit  # the limit binds
    parts, report = refine_max_send(cn, loads, start, k, cap, total_limit=limit)
    _, send, total, load = _objective(A, parts, k)
    assert total <= limit and send < send0 and load <= cap
    assert report["end"]["total"] == total
