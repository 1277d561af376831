"""plexus3d (Plexus's 3D SpMM) against scipy on 2x2x2 and 2x3x2, its bytes against the
volume model rank by rank, its all-gather / reduce-scatter sizes from the grid alone, and GCN
training with it against single-process PyTorch loss by loss on the same grids."""

from __future__ import annotations

import numpy as np
import pytest

GRIDS = {8: (2, 2, 2), 12: (2, 3, 2)}


@pytest.fixture(scope="module", params=sorted(GRIDS))
def runs(request, mpi_json):
    P = request.param
    return GRIDS[P], mpi_json(P, "plexus_cases.py", "x".join(map(str, GRIDS[P])), timeout=900)


@pytest.fixture(scope="module", params=sorted(GRIDS))
def trained(request, mpi_json):
    P = request.param
    shape = "x".join(map(str, GRIDS[P]))
    return GRIDS[P], mpi_json(P, "plexus_train.py", shape, timeout=900)


def test_training_equals_pytorch(trained, reference_for):
    """GCN training with plexus3d (3 layers, dropout and input dropout on, a directed graph
    of 61 vertices: no grid axis divides n) gives single-process PyTorch's loss at each of 3
    epochs (rtol 1e-5)."""
    shape, res = trained
    assert {c["trainer"] for c in res["cases"]} == {"rows"}
    for case in res["cases"]:
        assert case["grid"] == list(shape) and case["symmetric"] is False, case
        ref = reference_for(res["graph"], case)
        assert len(case["losses"]) == 3
        np.testing.assert_allclose(case["losses"], ref["losses"], rtol=1e-5,
                                   err_msg=f"{case['trainer']} {shape}")


def test_equals_scipy(runs):
    """A X and A^T Y in the caller's order: non-symmetric A, part vectors, uneven and empty
    parts, a rectangular A, n not divisible by P (rtol 1e-12 float64, 1e-5 float32)."""
    _, rows = runs
    assert len({r["case"] for r in rows}) == 5
    for r in rows:
        tol = 1e-12 if r["dtype"] == "float64" else 1e-5
        assert r["err"] < tol and r["err_t"] < tol, r


def test_volume_model_equals_comm_stats(runs):
    """``spmmgnn model``'s plexus3d bytes (sent and received, both directions) equal
    comm_stats() rank by rank, conversions included."""
    _, rows = runs
    checked = 0
    for r in rows:
        if r["model"] is None:
            continue
        for key, way, d in (("sent", "sent", "fwd"), ("received", "received", "fwd"),
                            ("sent_t", "sent", "bwd"), ("received_t", "received", "bwd")):
            assert r["model"][key] == [x[d][way] for x in r["ranks"]], (r["case"], key)
        checked += 1
    assert checked == 8


def test_algorithm_bytes_are_the_gather_and_reduce_scatter(runs):
    """The algorithm's own bytes (conversions apart) from the grid alone: rank (x, y, z)
    sends its block X[C_xz, F_y] to the Z - 1 others of its z line and the other rows of
    A[R_z, .] X (features F_y) along its x line; A^T Y the same with x and z swapped.
    Nothing of A moves; the conversions are counted apart and add up to bytes_sent."""
    from spmmgnn.stages import stage_ranges

    (X, Y, Z), rows = runs
    for r in rows:
        f, itemsize = (5, 8) if r["dtype"] == "float64" else (16, 4)
        m, n = r["m"], r["n"]
        rb, cb = stage_ranges(m, X * Z), stage_ranges(n, X * Z)
        for rank, got in enumerate(r["ranks"]):
            x, y, z = rank // (Y * Z), (rank // Z) % Y, rank % Z
            w = int(np.diff(stage_ranges(f, Y))[y]) * itemsize
            r_z = int(rb[(z + 1) * X] - rb[z * X])
            c_x = int(cb[(x + 1) * Z] - cb[x * Z])
            own_r, own_c = int(np.diff(rb)[z * X + x]), int(np.diff(cb)[x * Z + z])
            fwd = own_c * w * (Z - 1) + (r_z - own_r) * w
            bwd = own_r * w * (X - 1) + (c_x - own_c) * w
            assert got["fwd"]["algorithm_sent"] == fwd, (r["case"], rank)
            assert got["bwd"]["algorithm_sent"] == bwd, (r["case"], rank)
            for d in ("fwd", "bwd"):
                assert got[d]["algorithm_sent"] + got[d]["convert_sent"] == got[d]["sent"]
        # each tile once per feature line: every non-zero held Y times, none lost
        assert sum(x["nnz"] for x in r["ranks"]) == Y * r["nnz"], r["case"]


def test_refuses_what_it_cannot_do():
    """Codecs, a node-aware exchange, a bad permute_seed and a 2D grid: one clear error
    (in-process, P = 1)."""
    import scipy.sparse as sp
    from mpi4py import MPI

    import spmmgnn
    from spmmgnn.errors import SpmmgnnError

    A = sp.random(30, 30, density=0.1, format="csr", random_state=1)
    grid = spmmgnn.ProcessGrid(MPI.COMM_SELF, shape=(1, 1, 1))
    for options, words in (({"codec": "int8"}, "unknown options"),
                           ({"exchange": "node"}, "no halo exchange"),
                           ({"permute_seed": -1}, "permute_seed must be an integer >= 0")):
        with pytest.raises(SpmmgnnError, match=words):
            spmmgnn.DistSpMM.from_scipy(A, grid, algorithm="plexus3d", **options)
    with pytest.raises(SpmmgnnError, match="plexus3d runs on a 3d grid"):
        spmmgnn.DistSpMM.from_scipy(A, spmmgnn.ProcessGrid(MPI.COMM_SELF, shape=(1, 1)),
                                    algorithm="plexus3d")
    op = spmmgnn.DistSpMM.from_scipy(A, grid, algorithm="plexus3d", permute_seed=3)
    x = np.arange(60.0).reshape(30, 2)
    assert np.allclose(op.gather_rows(op.matmul(op.scatter_rows(x))), A @ x)
    assert np.allclose(op.gather_rows(op.matmul_t(op.scatter_rows(x, side="output")),
                                      side="input"), A.T @ x)
