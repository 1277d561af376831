"""1.5D algorithms on P/c x c grids against scipy, and bytes against the partition."""

from __future__ import annotations

import numpy as np
import pytest

from spmmgnn.stages import stage_ranges

# replica j's block columns, written out: k % c replicas take one stage more, in order
STAGES = {(1, 1): [0, 1], (2, 1): [0, 2], (3, 1): [0, 3], (4, 1): [0, 4], (2, 2): [0, 1, 2],
          (1, 2): [0, 1, 1], (4, 2): [0, 2, 4], (3, 3): [0, 1, 2, 3], (5, 2): [0, 3, 5],
          (3, 2): [0, 2, 3], (2, 4): [0, 1, 2, 2, 2], (7, 3): [0, 3, 5, 7], (6, 3): [0, 2, 4, 6]}

GRIDS = [(2, 1), (4, 2), (6, 2), (8, 2), (9, 3)]
TOL = {"float32": 1e-5, "float64": 1e-12}


def results(P, c, mpi_json):
    return mpi_json(P, "spmm_cases.py", "sparse15d", "oblivious15d", "--replication", str(c),
                    timeout=900)


@pytest.mark.parametrize(("P", "c"), GRIDS)
def test_matches_scipy(P, c, mpi_json):
    rows = results(P, c, mpi_json)
    assert len(rows) == 5 * 2 * 2 * 2
    for r in rows:
        label = f"{r['algorithm']} {r['case']} {r['dtype']} f={r['f']}"
        assert r["err"] <= TOL[r["dtype"]], f"A @ X wrong for {label}: {r['err']}"
        assert r["err_t"] <= TOL[r["dtype"]], f"A.T @ Y wrong for {label}: {r['err_t']}"


def expected_rows(r, block, replica, c):
    """(rows sent, rows received) by P(block, replica) in the forward exchange."""
    k = len(r["sizes"])
    b = STAGES[k, c]
    stages = range(b[replica], b[replica + 1])
    if r["algorithm"] == "sparse15d":
        pair = np.array(r["pair_volume"])  # pair[p, q]: rows p sends to q
        sent = pair[block].sum() if block in stages else 0
        recv = sum(pair[q, block] for q in stages)
    else:
        sizes = r["sizes"]
        sent = (k - 1) * sizes[block] if block in stages else 0
        recv = sum(sizes[q] for q in stages if q != block)
    return int(sent), int(recv)


@pytest.mark.parametrize(("P", "c"), GRIDS)
def test_bytes_equal_prediction(P, c, mpi_json):
    for r in results(P, c, mpi_json):
        row_bytes = r["f"] * r["itemsize"]
        for st in r["ranks"]:
            sent, recv = expected_rows(r, st["block"], st["replica"], c)
            fwd, bwd = st["fwd"], st["bwd"]
            label = f"{r['algorithm']} {r['case']} rank ({st['block']},{st['replica']})"
            assert (fwd["bytes_sent"], fwd["bytes_received"]) == (
                sent * row_bytes, recv * row_bytes), label
            assert (bwd["bytes_sent"], bwd["bytes_received"]) == (
                recv * row_bytes, sent * row_bytes), label
            block_bytes = r["sizes"][st["block"]] * row_bytes
            assert fwd["allreduce_bytes"] == (block_bytes if c > 1 else 0), label
            assert bwd["allreduce_bytes"] == (block_bytes if c > 1 else 0), label


def test_stage_ranges_written_out():
    for (k, c), expected in STAGES.items():
        assert list(stage_ranges(k, c)) == expected, (k, c)


def test_stages_spread_evenly():
    for k in range(1, 12):
        for c in range(1, 5):
            counts = np.diff(stage_ranges(k, c))
            assert counts.sum() == k and counts.max() - counts.min() <= 1
