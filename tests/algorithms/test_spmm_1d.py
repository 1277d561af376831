"""Distributed SpMM (1D algorithms) against scipy, and measured bytes against the metrics."""

from __future__ import annotations

import pytest

TOL = {"float32": 1e-5, "float64": 1e-12}


def results(P: int, mpi_json) -> list[dict]:
    return mpi_json(P, "spmm_cases.py")


@pytest.mark.parametrize("P", [1, 2, 3, 4])
@pytest.mark.parametrize("algorithm", ["sparse1d", "oblivious1d"])
def test_matches_scipy(P, algorithm, mpi_json):
    rows = [r for r in results(P, mpi_json) if r["algorithm"] == algorithm]
    assert len(rows) == 5 * 2 * 2  # cases x dtypes x f
    for r in rows:
        label = f"{r['case']} {r['dtype']} f={r['f']}"
        assert r["err"] <= TOL[r["dtype"]], f"A @ X wrong for {label}: {r['err']}"
        assert r["err_t"] <= TOL[r["dtype"]], f"A.T @ Y wrong for {label}: {r['err_t']}"


@pytest.mark.parametrize("P", [1, 2, 3, 4])
def test_sparse1d_bytes_equal_metrics(P, mpi_json):
    """bcast sends the send volume and receives the receive volume; reduce the reverse."""
    for r in results(P, mpi_json):
        if r["algorithm"] != "sparse1d":
            continue
        row_bytes = r["f"] * r["itemsize"]
        for st in r["ranks"]:
            b = st["block"]
            send, recv = r["send_volume"][b] * row_bytes, r["recv_volume"][b] * row_bytes
            assert (st["fwd"]["bytes_sent"], st["fwd"]["bytes_received"]) == (send, recv), r["case"]
            assert (st["bwd"]["bytes_sent"], st["bwd"]["bytes_received"]) == (recv, send), r["case"]
            assert st["fwd"]["exchanges"] == st["bwd"]["exchanges"] == 1


@pytest.mark.parametrize("P", [2, 3, 4])
def test_oblivious1d_bytes_equal_blocks(P, mpi_json):
    for r in results(P, mpi_json):
        if r["algorithm"] != "oblivious1d":
            continue
        row_bytes = r["f"] * r["itemsize"]
        sizes = r["sizes"]
        for st in r["ranks"]:
            b = st["block"]
            mine, others = sizes[b] * row_bytes, (sum(sizes) - sizes[b]) * row_bytes
            assert st["fwd"]["bytes_sent"] == (P - 1) * mine
            assert st["fwd"]["bytes_received"] == others
            assert st["bwd"]["bytes_sent"] == others
            assert st["bwd"]["bytes_received"] == (P - 1) * mine
