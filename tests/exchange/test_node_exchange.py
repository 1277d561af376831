"""The node-aware exchange (spmmgnn.exchange.node_exchange) at P = 2, 4, 6, 8 with 1-4 ranks
per node: the worker (tests/exchange/workers/node_cases.py) checks every algorithm against
scipy and the flat exchange; here its bytes per tier are compared with the volume model rank
by rank, and the inter-node bytes of every node with the flat exchange's."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from spmmgnn.benchmark.node_volumes import bin_needs, needs_1d, tier_bytes
from spmmgnn.benchmark.volumes import Layout, predict
from spmmgnn.exchange.nodes import node_of_rank

KEYS = ("sent", "received", "sent_inter", "received_inter")


def _matrix(case: dict) -> sp.csr_array:
    n = case["n"]
    return sp.csr_array((case["vals"], (case["rows"], case["cols"])), shape=(n, n))


@pytest.fixture(params=[2, 4, 6, 8])
def node_runs(request, mpi_json):
    return mpi_json(request.param, "node_cases.py")


def test_node_aware_equals_scipy_and_the_flat_exchange(node_runs):
    """Every algorithm, every ranks-per-node, both directions, codecs: no mismatch."""
    assert node_runs["errors"] == []
    seen = {(r["algorithm"], r["K"], r.get("codec")) for r in node_runs["runs"]}
    for algo in ("sparse1d", "sparse15d", "prepost1d", "sparse2d", "sparse3d"):
        assert any(a == algo for a, _, _ in seen), algo
    assert any(codec == "int8" for _, _, codec in seen)


def test_bytes_by_tier_equal_the_model(node_runs):
    """The model's bytes per tier, flat and node-aware, equal comm_stats rank by rank (the
    node-aware exchange sends nothing inside a node: its rows there are read from a shared
    window, ``bytes_shared_read``, as the model's ``shared``); the
    node-aware exchange moves at most the flat exchange's inter-node bytes out of and into
    every node, strictly less somewhere; auto counts what it chose."""
    P = node_runs["P"]
    fewer, autos, shared_rows = False, 0, False
    for run in node_runs["runs"]:
        if run["case"] == "delayed":
            continue
        case = node_runs["cases"][run["case"]]
        k = P // run["c"]
        layout = Layout.build(_matrix(case), case["parts"], k)
        node = node_of_rank(P, run["K"])
        inter = {}
        for exchange in ("flat", "node"):
            v = predict(run["algorithm"], layout, P, run["c"], run["f"], run["itemsize"],
                        run["codec"], shape=run["shape"], ranks_per_node=run["K"],
                        exchange=exchange)
            ranks = run["ranks"][exchange]
            for direction, sfx in (("fwd", ""), ("bwd", "_t")):
                for key in KEYS:
                    model = getattr(v, key.replace("sent", f"sent{sfx}").replace(
                        "received", f"received{sfx}"))
                    got = [r[direction][key] for r in ranks]
                    assert model.tolist() == got, (run["algorithm"], run["K"], run["c"],
                                                   run["shape"], run["codec"], exchange,
                                                   direction, key)
            if exchange == "node":   # inside a node rows are read from shared memory
                assert all(r[d]["sent_intra"] == 0 for r in ranks for d in ("fwd", "bwd"))
                for direction, sfx in (("fwd", ""), ("bwd", "_t")):
                    model = getattr(v, f"shared{sfx}")
                    assert model.tolist() == [r[direction]["shared"] for r in ranks], (
                        run["algorithm"], run["K"], direction)
                    shared_rows |= bool(model.sum())
            inter[exchange] = [np.bincount(node, [r["fwd"][key] for r in ranks])
                               for key in ("sent_inter", "received_inter")]
            assert all(r["fwd"]["node_exchanges"] == (exchange == "node") * r["fwd"]["exchanges"]
                       for r in ranks)
        if run["ranks"]["flat"][0]["route"] == "sparse":   # not SUMMA (grid_route.py)
            for flat, aware in zip(inter["flat"], inter["node"], strict=True):
                assert np.all(aware <= flat), (run["algorithm"], run["K"], flat, aware)
                fewer |= bool(aware.sum() < flat.sum())
        if "auto" in run["ranks"]:
            auto = run["ranks"]["auto"]
            chosen = set(auto[0]["report"]["chosen"].values())
            assert auto[0]["report"]["option"] == "auto" and chosen and chosen <= {
                "flat", "node", "flat/node"}
            autos += 1
    assert (fewer or P == 2) and autos and shared_rows  # P = 2: one node or one each


def test_delayed_bins_by_tier_equal_the_model(node_runs):
    """cd-2 on sparse1d: four calls post each bin twice (the last two are drained), with
    the model's bytes per tier, flat and node-aware (the bins dealt per rank as
    ``delayed.ghost_bins`` deals them); the backward sends only when delayed."""
    P = node_runs["P"]
    for run in (r for r in node_runs["runs"] if r["case"] == "delayed"):
        case = node_runs["cases"][f"k{P}"]
        layout = Layout.build(_matrix(case), case["parts"], P)
        bins = bin_needs(needs_1d(layout, P, 1), 2, seed=3)
        rb = run["f"] * run["itemsize"]
        back = run["backward"] == "delayed"
        for exchange in ("flat", "node"):
            b = [tier_bytes([(n, False)], P, run["K"], exchange, rb, rb, rb, rb) for n in bins]
            for key in KEYS:
                t_key = key.replace("sent", "sent_t").replace("received", "received_t")
                want = 2 * sum(x[key] + back * x[t_key] for x in b)
                assert want.tolist() == [r[key] for r in run["ranks"][exchange]], (
                    exchange, run["K"], run["backward"], key)


def test_a_staged_plan_never_reads_in_place():
    """On a torch backend over MPI a node-aware or auto plan runs on host copies
    (``StagedPlan``): the products multiply the landed ghost rows, never the node's window
    that ``auto``'s node-aware half would read in place, and a call returns tensors."""
    import torch
    from mpi4py import MPI

    from spmmgnn.algorithms.ghost import GhostBlock
    from spmmgnn.backend.torch_backend import TorchBackend
    from spmmgnn.exchange.auto_plan import exchange_plan
    from spmmgnn.runtime.stats import CommStats

    be = TorchBackend(torch.device("cpu"))
    for exchange in ("node", "auto"):
        plan = exchange_plan(exchange, MPI.COMM_SELF, np.array([0, 5]),
                             np.zeros(0, dtype=np.int64), CommStats(), backend=be)
        block = GhostBlock([], plan, CommStats())
        assert not block.in_place, exchange
        rows = block.land(block.start_bcast(torch.ones(5, 3, dtype=torch.float64), 0))
        assert isinstance(rows, torch.Tensor) and rows.shape == (0, 3), exchange
