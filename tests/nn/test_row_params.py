"""Parameters distributed by rows (``spmmgnn.nn.RowEmbedding`` / ``distributed_rows``) next
to replicated weights through ``allreduce_gradients``, under real ``mpiexec`` at P = 2 (1D)
and P = 4 (1.5D c = 2, 2D 2x2, 3D 2x1x2): a LightGCN-like model's gradients and one Adam
step equal one process's torch on the whole table; an undeclared table is refused on every
rank with the fix whatever its values (zeros, the same seed), whether the blocks have equal
sizes or not (tests/nn/workers/row_params_cases.py)."""

from __future__ import annotations

import pytest
import torch

from spmmgnn import DistSpMM, ProcessGrid, SpmmgnnError
from spmmgnn.nn import RowEmbedding, allreduce_gradients, distributed_rows

GRIDS = {2: ["c1"], 4: ["c2", "2d", "3d"]}
CASES = ["uneven", "empty", "equal"]


def results(P: int, mpi_json) -> dict:
    return mpi_json(P, "row_params_cases.py")


@pytest.mark.parametrize("P", sorted(GRIDS))
def test_row_table_and_replicated_weights_match_one_process(P, mpi_json):
    r = results(P, mpi_json)
    for g in GRIDS[P]:
        for case in CASES:
            for what in ("init", "grad_rows", "grad_weight", "grad_bias", "step_rows",
                         "step_weight", "step_bias"):
                key = f"{g}:{case}:{what}"
                assert r[key] < 1e-12, (key, r[key])
            assert r[f"{g}:{case}:replicas_same_bits"] is True


@pytest.mark.parametrize("P", sorted(GRIDS))
def test_seeded_table_declared_by_rows_matches_one_process(P, mpi_json):
    """A table drawn by ``torch.randn`` after the same seed on equal blocks holds the same
    values on every rank; declared with ``distributed_rows`` its gradients and Adam step
    are one process's (P = 2 and a 2 x 2 grid among the P = 4 grids)."""
    r = results(P, mpi_json)
    for g in GRIDS[P]:
        assert r[f"{g}:seeded_equal_everywhere"] is True, g
        for what in ("grad_rows", "grad_weight", "grad_bias", "step_rows", "step_bias"):
            key = f"{g}:seeded:{what}"
            assert r[key] < 1e-12, (key, r[key])


@pytest.mark.parametrize("P", sorted(GRIDS))
@pytest.mark.parametrize("case", ["equal", "unequal"])
@pytest.mark.parametrize("kind", ["zeros", "seeded", "drawn"])
def test_undeclared_table_is_refused_whatever_its_values(P, case, kind, mpi_json):
    """An undeclared per-vertex table is refused on every rank, naming it and both fixes,
    also when it holds the same values everywhere (zeros; ``torch.randn`` after the same
    seed on equal blocks), which a comparison of values let through with other vertices'
    gradients summed into its rows."""
    r = results(P, mpi_json)
    for g in GRIDS[P]:
        msgs = r[f"{g}:refuse_{case}_{kind}"]
        assert len(msgs) == P and all(msgs) and len(set(msgs)) == 1, (g, msgs)
        m = msgs[0]
        named = "parameter #1 ('emb.table')" if kind == "drawn" else "parameter #1 "
        assert named in m, m
        assert "declared neither distributed by rows nor replicated" in m, m
        assert "distributed_rows(param, op)" in m and "RowEmbedding" in m, m
        assert "spmmgnn.nn.replicated(param)" in m, m


@pytest.mark.parametrize("P", sorted(GRIDS))
def test_weight_shaped_like_rows_passes_once_declared_replicated(P, mpi_json):
    r = results(P, mpi_json)
    for g in GRIDS[P]:
        msgs = r[f"{g}:head_undeclared"]
        assert len(msgs) == P and all("parameter #0 " in m for m in msgs), (g, msgs)
        assert r[f"{g}:head_declared"] == [None] * P, (g, r[f"{g}:head_declared"])


@pytest.mark.parametrize("P", sorted(GRIDS))
@pytest.mark.parametrize("what, words", [("values", "other values"),
                                         ("shape", "another shape")])
def test_replicated_weight_differing_between_ranks_is_refused(P, what, words, mpi_json):
    r = results(P, mpi_json)
    for g in GRIDS[P]:
        msgs = r[f"{g}:replicated_other_{what}"]  # (each names its own shape)
        assert len(msgs) == P and all(msgs), (g, msgs)
        assert all("parameter #0 " in m and words in m for m in msgs), msgs


@pytest.mark.parametrize("P", sorted(GRIDS))
def test_wrong_registration_is_refused_on_every_rank(P, mpi_json):
    r = results(P, mpi_json)
    for g in GRIDS[P]:
        msgs = r[f"{g}:refuse_register"]
        assert len(msgs) == P and all("op.row_ids('output')" in m for m in msgs), msgs


def test_one_process_registration_and_init():
    """P = 1: a RowEmbedding is registered and keeps its gradient; a replicated weight is
    summed (nothing to sum with); a bad side is refused."""
    import scipy.sparse as sp

    A = sp.random(6, 6, density=0.5, random_state=0, format="csr")
    op = DistSpMM.from_scipy(A, ProcessGrid())
    emb = RowEmbedding(op, 3, seed=1)
    assert emb.weight.shape == (6, 3) and float(emb.weight.detach().abs().max()) <= 0.1
    assert emb.weight.dtype == torch.float32 and list(emb.ids) == list(range(6))
    emb().sum().backward()
    allreduce_gradients([emb.weight], op)
    assert torch.equal(emb.weight.grad, torch.ones(6, 3))
    with pytest.raises(SpmmgnnError, match="side must be 'input' or 'output'"):
        distributed_rows(torch.zeros(6, 2), op, side="rows")


@pytest.mark.parametrize("P", sorted(GRIDS))
def test_wrong_side_rows_on_one_rank_name_its_count_everywhere(P, mpi_json):
    """The last rank passes output-side rows to ``norm``: every rank raises, naming the
    input side, that rank's row count and the fix (tests/algorithms/test_row_errors.py at P = 1)."""
    r = results(P, mpi_json)
    for g in GRIDS[P]:
        msgs, rows = r[f"{g}:rows_message"], r[f"{g}:rows_expected"]
        assert len(msgs) == P and all(msgs), msgs
        for m in msgs:
            assert f"expected this rank's {rows} rows of the input side" in m, m
            assert "op.scatter_rows(X)" in m and f"(rank {P - 1})" in m, m


def test_replicated_check_reads_any_dtype_and_scalars():
    """The replicated-values check hashes raw bytes: bfloat16 weights and 0-d parameters
    (which numpy cannot hold or has no rows of) go through at P = 1."""
    grid = ProcessGrid()
    w = torch.nn.Parameter(torch.ones(3, 2, dtype=torch.bfloat16))
    w.grad = torch.full_like(w, 2.0)
    s = torch.nn.Parameter(torch.tensor(2.0))
    allreduce_gradients([w, s], grid)
    assert w.grad.dtype == torch.bfloat16 and torch.equal(w.grad, torch.full_like(w, 2.0))
    assert torch.equal(s.grad, torch.tensor(0.0))
