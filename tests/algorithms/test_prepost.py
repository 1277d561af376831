"""prepost1d (hybrid pre/post-aggregation, SuperGCN §3.3.1) at P = 2, 3, 4.

Values against scipy (square non-symmetric, uneven blocks with an empty one, rectangular);
with each codec against sparse1d under the same codec; rows per ordered pair against the
minimum vertex cover size of an independent maximum matching (König); bytes against those
rows and never above sparse1d's.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse.csgraph import maximum_bipartite_matching

F = 6


def results(P, mpi_json):
    return mpi_json(P, "prepost_cases.py")


def cover_sizes(A: np.ndarray, ro: list[int], co: list[int]) -> np.ndarray:
    """c[p, q]: minimum vertex cover (= maximum matching) of the cut non-zeros of block row
    p in block column q; and the distinct columns sparse1d would send."""
    k = len(ro) - 1
    cover, columns = np.zeros((k, k), np.int64), np.zeros((k, k), np.int64)
    for p in range(k):
        for q in range(k):
            block = A[ro[p]:ro[p + 1], co[q]:co[q + 1]]
            if p == q or not block.any():
                continue
            match = maximum_bipartite_matching(sp.csr_array(block != 0), perm_type="column")
            cover[p, q] = int((match >= 0).sum())
            columns[p, q] = int(block.any(axis=0).sum())
    return cover, columns


@pytest.mark.parametrize("P", [2, 3, 4])
def test_prepost_equals_scipy(P, mpi_json):
    for r in results(P, mpi_json):
        if r["codec"] is not None:
            continue
        A = np.array(r["A"])
        X = np.random.default_rng(1).standard_normal((A.shape[1], F))
        Y = np.random.default_rng(2).standard_normal((A.shape[0], F))
        pp = r["prepost1d"]
        np.testing.assert_allclose(pp["z"], A @ X, atol=1e-12, err_msg=r["case"])
        np.testing.assert_allclose(pp["t"], A.T @ Y, atol=1e-12, err_msg=r["case"])


@pytest.mark.parametrize("P", [2, 3, 4])
def test_rows_per_pair_are_the_minimum_vertex_cover(P, mpi_json):
    for r in results(P, mpi_json):
        A, pp = np.array(r["A"]), r["prepost1d"]
        cover, columns = cover_sizes(A, pp["row_offsets"], pp["col_offsets"])
        width = {None: 8 * F, "float32": 4 * F, "float16": 2 * F, "bfloat16": 2 * F,
                 "int8": F + 4, "int4": 3 + 4, "int2": 2 + 4}[r["codec"]]  # F = 6
        for p, st in enumerate(pp["ranks"]):
            assert st["rows_from"] == cover[p].tolist(), (r["case"], p)
            assert st["fwd"][1] == cover[p].sum() * width, (r["case"], r["codec"], p)
            assert st["fwd"][0] == cover[:, p].sum() * width, (r["case"], r["codec"], p)
            assert st["bwd"] == [st["fwd"][1], st["fwd"][0]], (r["case"], p)  # mirror plan
        assert np.all(cover <= columns)
        sent = sum(st["fwd"][0] for st in pp["ranks"])
        assert sent <= sum(st["fwd"][0] for st in r["sparse1d"]["ranks"]), r["case"]


@pytest.mark.parametrize("P", [2, 3, 4])
def test_prepost_with_codecs_agrees_with_sparse1d(P, mpi_json):
    """Same codec, same error scale: prepost1d's error is at most 3x sparse1d's (the pre-
    aggregated partial sums are rounded with their own ranges) and unbiased."""
    for r in results(P, mpi_json):
        if r["codec"] is None:
            continue
        A = np.array(r["A"])
        X = np.random.default_rng(1).standard_normal((A.shape[1], F))
        Y = np.random.default_rng(2).standard_normal((A.shape[0], F))
        for key, exact in (("z", A @ X), ("t", A.T @ Y)):
            ours = np.array(r["prepost1d"][key])
            base = np.array(r["sparse1d"][key])
            err, err_base = np.abs(ours - exact).max(), np.abs(base - exact).max()
            label = (r["case"], r["codec"], key)
            assert err <= 3 * err_base + 1e-6 * np.abs(exact).max(), (label, err, err_base)
            if r["codec"].startswith("int"):
                scale = (ours * exact).sum() / (exact * exact).sum()
                assert abs(scale - 1) < 0.1, (label, scale)


def test_training_on_one_node_reads_in_place_with_the_flat_numbers(tmp_path):
    """``spmmgnn train --algorithm prepost1d`` without ``--exchange`` on one machine: the node
    exchange reads the received rows (``M_recv``'s) in place, sends no message, and trains
    to the flat exchange's losses bit for bit."""
    import json

    from ..mpi import run_cli

    runs = {}
    for name, extra in (("default", ()), ("flat", ("--exchange", "flat"))):
        out = tmp_path / f"{name}.json"
        proc = run_cli(2, "train", "--algorithm", "prepost1d", "--csbm-n", "1500",
                       "--epochs", "4", "--hidden", "16", "--quiet", "--json", str(out), *extra)
        assert proc.returncode == 0, proc.stderr
        runs[name] = json.loads(out.read_text())
    node, flat = runs["default"], runs["flat"]
    assert node["exchange"]["option"] == "node" and flat["exchange"]["option"] == "flat"
    assert all(r["bytes_sent"] == 0 and r["bytes_shared_read"] > 0 for r in node["ranks"])
    assert all(r["bytes_sent"] > 0 for r in flat["ranks"])
    assert [h["loss"] for h in node["history"]] == [h["loss"] for h in flat["history"]]
