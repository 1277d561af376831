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
    of 61 vertices: no grid axis divides n), in the row layout and in Plexus's blocks (1 and
    3 row blocks), gives single-process PyTorch's loss at each of 3 epochs (rtol 1e-5) and
    its accuracies."""
    shape, res = trained
    assert [(c["trainer"], c["row_blocks"]) for c in res["cases"]] == [
        ("rows", 0), ("plexus", 1), ("plexus", 3)]
    for case in res["cases"]:
        label = f"{case['trainer']} {case['row_blocks']} {shape}"
        assert case["grid"] == list(shape) and case["symmetric"] is False, label
        ref = reference_for(res["graph"], case)
        assert len(case["losses"]) == 3
        np.testing.assert_allclose(case["losses"], ref["losses"], rtol=1e-5, err_msg=label)
        for split in ("train_acc", "val_acc", "test_acc"):
            assert case["final"][split] == pytest.approx(ref[split], abs=1e-9), (label, split)


def test_plexus_layout_converts_only_the_logits(trained):
    """In Plexus's blocks an epoch converts nothing but the logits (to rows, and their
    gradient back): per rank its convert bytes equal those of converting one logits-wide
    matrix alone; every other byte is the algorithm's (gathers and reduce-scatters). The
    row-layout trainer converts every SpMM's input and output: more on some rank."""
    _, res = trained
    by = {(c["trainer"], c["row_blocks"]): c for c in res["cases"]}
    for key in (("plexus", 1), ("plexus", 3)):
        for rank, r in enumerate(by[key]["ranks"]):
            assert r["convert"]["epoch"]["convert"] == r["convert"]["logits"], (key, rank)
            assert r["convert"]["epoch"]["algorithm"] > 0, (key, rank)
        # the same blocks move whatever the row blocks: only their sizes differ
        assert [r["convert"]["epoch"] for r in by[key]["ranks"]] == \
            [r["convert"]["epoch"] for r in by[("plexus", 1)]["ranks"]]
    rows = [r["convert"]["epoch"]["convert"] for r in by[("rows", 0)]["ranks"]]
    plexus = [r["convert"]["epoch"]["convert"] for r in by[("plexus", 1)]["ranks"]]
    assert all(a >= b for a, b in zip(rows, plexus, strict=True)) and sum(rows) > sum(plexus)


def test_volume_model_prices_the_kept_epoch(trained):
    """``spmmgnn model``'s step in Plexus's blocks (``benchmark.kept_volumes``, from the
    partition alone) equals each rank's measured bytes of one training step by phase
    (algorithm, convert), with 1 and 3 row blocks, on 2x2x2 and 2x3x2."""
    _, res = trained
    for case in res["cases"]:
        if case["trainer"] != "plexus":
            continue
        got = [[r["convert"]["epoch"]["algorithm"], r["convert"]["epoch"]["convert"]]
               for r in case["ranks"]]
        assert got == res["model"], case["row_blocks"]


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
    from spmmgnn.runtime.errors import SpmmgnnError

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


def test_probe_symmetry_on_a_symmetric_matrix():
    """``probe_symmetry`` finds a symmetric A symmetric (it had no blocks to drop the
    transposes of, and failed there), and the products stay right (in-process, P = 1)."""
    import scipy.sparse as sp
    from mpi4py import MPI

    import spmmgnn

    B = sp.random(30, 30, density=0.1, format="csr", random_state=2)
    A = sp.csr_array(B + B.T)
    grid = spmmgnn.ProcessGrid(MPI.COMM_SELF, shape=(1, 1, 1))
    op = spmmgnn.DistSpMM.from_scipy(A, grid, algorithm="plexus3d")
    assert op.probe_symmetry() is True
    x = np.arange(60.0).reshape(30, 2)
    assert np.allclose(op.gather_rows(op.matmul_t(op.scatter_rows(x, side="output")),
                                      side="input"), A @ x)


def test_plexus_layout_refuses_what_it_cannot_do():
    """``plexus_blocks`` with another algorithm, GraphSAGE, LayerNorm, a negative count or
    more row blocks than a vertex block has rows (2**31 - 1 allocated 16 GiB): one clear
    error (in-process, P = 1); on a 1 x 1 x 1 grid the blocks train as the rows."""
    from mpi4py import MPI

    import spmmgnn
    from spmmgnn.data.csbm import csbm
    from spmmgnn.runtime.errors import SpmmgnnError
    from spmmgnn.training import TrainConfig, Trainer, distribute_graph

    g = csbm(n=40, avg_degree=4.0, num_features=5, num_classes=3, seed=2)
    grid = spmmgnn.ProcessGrid(MPI.COMM_SELF, shape=(1, 1, 1))
    data = distribute_graph(g, grid, "gcn", algorithm="plexus3d")
    base = dict(layers=2, hidden=4, epochs=2, progress=False, seed=1, dropout=0.5)
    for extra, words in (({"model": "sage"}, "trains GCN without --layernorm"),
                         ({"layernorm": True}, "trains GCN without --layernorm"),
                         ({"plexus_blocks": -1}, "--plexus-blocks must be >= 0"),
                         ({"plexus_blocks": 2**31 - 1}, r"takes 1 to 40 row blocks "
                          r"\(--plexus-blocks\) here, got 2147483647: .* the largest holds "
                          r"40 rows \(n = 40 in X Z = 1 blocks of the 1x1x1 grid\)"),
                         ({"plexus_blocks": 41}, "takes 1 to 40 row blocks")):
        cfg = TrainConfig(**{**base, "plexus_blocks": 2, **extra})
        with pytest.raises(SpmmgnnError, match=words):
            Trainer(distribute_graph(g, grid, "mean", algorithm="plexus3d")
                    if extra.get("model") == "sage" else data, cfg)
    rows = spmmgnn.ProcessGrid(MPI.COMM_SELF)
    with pytest.raises(SpmmgnnError, match="needs --algorithm plexus3d"):
        Trainer(distribute_graph(g, rows, "gcn", algorithm="sparse1d"),
                TrainConfig(**base, plexus_blocks=1))
    losses = [[h["loss"] for h in Trainer(data, TrainConfig(**base, plexus_blocks=k)).fit()
               ["history"]] for k in (0, 2)]
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-6)
