"""The 2D and 3D algorithms (sparse2d, oblivious2d, sparse3d, oblivious3d) against scipy on
the grids of issue 36, with the sparse algorithms' two promises: never more bytes than the
oblivious baseline on the same grid, never more peers than the grid's lines through a rank."""

from __future__ import annotations

import pytest

GRIDS = {4: ["2x2"], 6: ["2x3"], 8: ["2x2x2"], 9: ["3x3"], 12: ["2x3x2"], 16: ["4x4"]}


@pytest.fixture(scope="module", params=sorted(GRIDS))
def runs(request, mpi_json):
    P = request.param
    return P, mpi_json(P, "grid_cases.py", *GRIDS[P], timeout=600)


def test_equals_scipy(runs):
    P, rows = runs
    ndim = GRIDS[P][0].count("x") + 1
    assert {r["algorithm"] for r in rows} == {f"sparse{ndim}d", f"oblivious{ndim}d"}
    assert len({r["case"] for r in rows}) == 3
    for r in rows:
        tol = 1e-12 if r["dtype"] == "float64" else 2e-6
        assert r["err"] < tol and r["err_t"] < tol, r


def test_sparse_never_sends_more_than_oblivious(runs):
    """Per rank and in total, forward and transpose, on every case and dtype."""
    _, rows = runs
    by_key = {(r["case"], r["dtype"], r["algorithm"][:6]): r for r in rows}
    for (case, dtype, kind), r in by_key.items():
        if kind != "sparse":
            continue
        o = by_key[case, dtype, "oblivi"]
        for key in ("sent", "sent_t"):
            sparse = [x[key] for x in r["ranks"]]
            obl = [x[key] for x in o["ranks"]]
            assert sum(sparse) <= sum(obl) and max(sparse) <= max(obl), (case, dtype, key)


def test_sparse_peers_stay_on_the_grid_lines(runs):
    """A rank of a pr x pc grid talks to at most pr + pc - 2 others (+ pl - 1 in 3D)."""
    _, rows = runs
    for r in rows:
        if r["algorithm"].startswith("sparse"):
            bound = sum(r["shape"]) - len(r["shape"])
            assert max(x["peers"] for x in r["ranks"]) <= bound, r["shape"]
