"""The two-tier alpha-beta model, the tier volume model's special cases and the two-level
partitioner, in one process (the MPI side: tests/exchange/test_node_exchange.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

from spmmgnn.benchmark.costs import Machine, spmm_time
from spmmgnn.benchmark.volumes import Layout, predict
from spmmgnn.partitioners import partition
from spmmgnn.partitioners.twolevel import node_volume
from spmmgnn.runtime.errors import SpmmgnnError

from ..mpi import run_cli

ALPHA, BETA, A_IN, B_IN = 2e-6, 1e-9, 3e-7, 1e-10


def _layout(P: int = 8, n: int = 400, seed: int = 5) -> Layout:
    A = sp.random(n, n, density=0.03, random_state=seed, format="csr")
    A = sp.csr_array(A + sp.eye(n))
    return Layout.build(A, np.random.default_rng(seed).integers(0, P, n), P)


def _exchange(vol, K: int | None) -> float:
    m = Machine(ALPHA, BETA, 1e30, ranks_per_node=K, alpha_intra=A_IN, beta_intra=B_IN)
    return spmm_time("sparse1d", None, vol, 8, 1, 4, 4, m)["exchange"]


def test_two_tiers_reduce_to_one_at_the_extremes():
    """One rank per node: every byte crosses the network, the node-aware legs 1 and 3 are
    copies to oneself, so flat = node-aware = the one-tier model. One node: every byte
    stays inside it, priced at the intra-node alpha and beta."""
    layout, P = _layout(), 8
    one = spmm_time("sparse1d", layout, predict("sparse1d", layout, P, 1, 4, 4), P, 1, 4, 4,
                    Machine(ALPHA, BETA, 1e30))["exchange"]
    flat1 = predict("sparse1d", layout, P, 1, 4, 4, ranks_per_node=1)
    node1 = predict("sparse1d", layout, P, 1, 4, 4, ranks_per_node=1, exchange="node")
    assert _exchange(flat1, 1) == pytest.approx(one)
    assert _exchange(node1, 1) == pytest.approx(one)
    assert node1.sent.tolist() == flat1.sent.tolist() == flat1.sent_inter.tolist()
    flat8 = predict("sparse1d", layout, P, 1, 4, 4, ranks_per_node=8)
    assert flat8.sent_inter.sum() == 0
    peers = np.maximum((layout.pair_volume() > 0).sum(0), (layout.pair_volume() > 0).sum(1))
    want = A_IN * peers + B_IN * np.maximum(flat8.sent, flat8.received)
    assert _exchange(flat8, 8) == pytest.approx(want.max())


def test_inter_node_links_are_shared_by_the_node():
    """Max-rate: with two ranks per node and one link, a rank's inter-node step costs its
    node's bytes; the node-aware exchange moves fewer of them and its three legs add up."""
    layout, P = _layout(), 8
    flat = predict("sparse1d", layout, P, 1, 4, 4, ranks_per_node=2)
    node = predict("sparse1d", layout, P, 1, 4, 4, ranks_per_node=2, exchange="node")
    assert node.sent_inter.sum() < flat.sent_inter.sum()
    inter = [p for p in flat.tier_phases if p.tier == "inter"][0]
    pair = np.arange(P) // 2
    node_bytes = np.maximum(np.bincount(pair, flat.sent_inter)[pair],
                            np.bincount(pair, flat.received_inter)[pair])
    assert inter.node_bytes.tolist() == node_bytes.tolist()
    legs = [p.tier for p in node.tier_phases]
    assert legs == ["intra", "inter", "intra"] and [p.step for p in node.tier_phases] == [0, 1, 2]
    m = Machine(ALPHA, BETA, 1e30, ranks_per_node=2, alpha_intra=A_IN, beta_intra=B_IN)
    per_leg = [ALPHA * p.latency + BETA * np.maximum(p.bytes, p.node_bytes)
               if p.tier == "inter" else A_IN * p.latency + B_IN * p.bytes
               for p in node.tier_phases]
    assert spmm_time("sparse1d", layout, node, P, 1, 4, 4, m)["exchange"] == pytest.approx(
        sum(per_leg).max())


def test_two_level_partition_and_its_node_volume():
    """twolevel:metis-vol on 8 parts of 4 per node; node_volume counts exactly what the tier
    model moves between nodes (sparse1d, one 1-byte value per row), flat and node-aware; a
    parts per node that does not divide k is refused."""
    A = sp.csr_array(sp.random(300, 300, density=0.02, random_state=2, format="csr")
                     + sp.eye(300))
    p = partition(A, 8, method="twolevel:metis-vol", parts_per_node=4)
    assert p.method == "twolevel:metis-vol" and p.k == 8
    vol = node_volume(A, p.parts, 4)
    layout = Layout.build(A, p.parts, 8)
    for exchange in ("flat", "node"):
        v = predict("sparse1d", layout, 8, 1, 1, 1, ranks_per_node=4, exchange=exchange)
        assert int(v.sent_inter.sum()) == vol[exchange]
    assert vol["node"] <= vol["flat"]
    with pytest.raises(SpmmgnnError, match="positive divisor of k=8"):
        partition(A, 8, method="twolevel:metis-vol", parts_per_node=3)


def test_model_cli_prices_both_exchanges(tmp_path):
    """spmmgnn model --ranks-per-node: a flat and a node-aware row per sparse algorithm, one
    row for the oblivious one, the inter-node bytes, and what auto picks."""
    out = tmp_path / "model.json"
    proc = run_cli(1, "model", "random:n=2000,avg_degree=8", "--P", "8", "--c", "1",
                   "--algorithm", "sparse1d", "oblivious1d", "--preset", "ib-hdr",
                   "--ranks-per-node", "2", "4", "--rate", "1e9", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    got = json.loads(out.read_text())
    rows = {(r["ranks_per_node"], r["algorithm"], r["exchange_kind"]): r
            for r in got["predictions"]}
    assert set(rows) == {(K, a, e) for K in (2, 4) for a, e in
                         (("sparse1d", "flat"), ("sparse1d", "node"), ("oblivious1d", None))}
    for K in (2, 4):
        assert rows[K, "sparse1d", "node"]["inter_bytes_sent"] < \
            rows[K, "sparse1d", "flat"]["inter_bytes_sent"]
    assert sum("auto:" in s for s in got["summary"]) == 2
    assert "inside a node alpha=4e-07" in proc.stdout


def test_bad_node_options_are_one_error_on_every_rank():
    """A ranks-per-node below 1 and a node-aware exchange on an algorithm without a halo
    exchange: one readable line, status 2, no traceback, at P = 2."""
    from ..mpi import one_line_error

    one_line_error(run_cli(2, "spmm", "--scale", "8", "--ranks-per-node", "0", "--repeat", "1"),
                   "argument --ranks-per-node: must be an integer in [1, 2147483647], got 0")
    one_line_error(run_cli(2, "train", "--csbm-n", "500", "--epochs", "1", "--exchange", "node",
                           "--algorithm", "oblivious1d"),
                   "oblivious1d has no halo exchange to make node-aware")
