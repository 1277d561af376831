"""reorder="rcm": each block row renumbered by reverse Cuthill–McKee, invisible to the caller.

At P = 1, 2, 3 on a randomly numbered directed grid: results equal scipy in the caller's
order, bytes are those of the operator without reordering (same blocks, same sets of rows),
each rank keeps the same set of vertices in a different order, and the diagonal block's
bandwidth shrinks (the point of RCM). A rectangular A is refused on every rank.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from spmmgnn.reorder import block_rcm

from ..mpi import run_mpi_json


@pytest.mark.parametrize("P", [1, 2, 3])
def test_rcm_is_invisible_and_keeps_the_bytes(P, tmp_path):
    r = run_mpi_json(P, "reorder_cases.py", tmp_path)
    data, indices, indptr = r["A"]
    A = sp.csr_array((data, indices, indptr)).toarray()
    X = np.random.default_rng(1).standard_normal((A.shape[1], 4))
    Y = np.random.default_rng(2).standard_normal((A.shape[0], 4))
    plain, rcm = r["runs"]["None"], r["runs"]["rcm"]
    for run in (plain, rcm):
        np.testing.assert_allclose(run["z"], A @ X, atol=1e-12)
        np.testing.assert_allclose(run["t"], A.T @ Y, atol=1e-12)
    for a, b in zip(plain["ranks"], rcm["ranks"], strict=True):
        assert (a["sent"], a["received"]) == (b["sent"], b["received"])
        assert sorted(a["ids"]) == sorted(b["ids"])
    if P < 3:  # with 144 vertices over few blocks RCM must change some block's order
        assert any(a["ids"] != b["ids"] for a, b in zip(plain["ranks"], rcm["ranks"],
                                                        strict=True))
    assert len(set(r["errors"])) == 1 and r["errors"][0].startswith("True: reorder='rcm' needs")


def test_block_rcm_narrows_the_band_inside_blocks():
    side = 20
    ids = np.arange(side * side).reshape(side, side)
    src = np.concatenate([ids[:, :-1].ravel(), ids[:-1, :].ravel()])
    dst = np.concatenate([ids[:, 1:].ravel(), ids[1:, :].ravel()])
    perm = np.random.default_rng(3).permutation(side * side)
    A = sp.csr_array((np.ones(src.size), (dst, src)), shape=(side * side,) * 2)[perm][:, perm]
    offsets = np.array([0, 150, 150, 400])  # an empty block too
    order = block_rcm(sp.csr_array(A), offsets)
    assert sorted(order[:150]) == list(range(150)) and sorted(order[150:]) == list(range(150, 400))

    def band(M, lo, hi):
        B = sp.coo_array(M[lo:hi, lo:hi])
        return int(np.abs(B.row - B.col).max())

    R = sp.csr_array(A[order][:, order])
    for lo, hi in ((0, 150), (150, 400)):
        assert band(R, lo, hi) < band(A, lo, hi) / 3


@pytest.mark.slow
def test_training_with_rcm_matches_the_plain_run(tmp_path):
    import json

    from ..mpi import run_cli

    losses = {}
    for flag in ("none", "rcm"):
        out = tmp_path / f"{flag}.json"
        proc = run_cli(2, "train", "--csbm-n", "600", "--epochs", "4", "--hidden", "8",
                       "--dtype", "float64", "--quiet", "--reorder", flag, "--json", str(out))
        assert proc.returncode == 0, proc.stderr[-2000:]
        losses[flag] = [h["loss"] for h in json.loads(out.read_text())["history"]]
    np.testing.assert_allclose(losses["rcm"], losses["none"], rtol=1e-12)
