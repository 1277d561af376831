"""The operator's linear algebra for research code (``algorithms/linalg.py``,
``collectives.py``, ``nn.spmm_t``, ``nn.allreduce_gradients``), under real ``mpiexec``: every
value against numpy/scipy/torch on the whole matrices, on 1D grids, on 1.5D grids with
c = 2 (each row counted once) and on 2D and 3D grids, square and rectangular operators (both
sides), numpy and torch, 2-D and 1-D. One worker run per P checks every case
(tests/algorithms/workers/linalg_cases.py).
"""

from __future__ import annotations

import math

import pytest

PS = [1, 3, 4]


def results(P: int, mpi_json) -> dict:
    return mpi_json(P, "linalg_cases.py")


def grids(P: int) -> list[str]:
    """The grids the worker runs at P (1D at P = 1 and 3, the others at P = 4)."""
    return ["c2", "2d", "3d"] if P == 4 else ["c1"]


def keys(r: dict, P: int, what: str) -> list[str]:
    """The result keys ``<grid>:...:<what>`` of the grids P allows (``qr_`` takes every QR
    key)."""
    found = [k for k in r if k.split(":")[0] in grids(P)
             and (k.split(":")[-1] == what or (what == "qr_" and ":qr_" in k))]
    assert found, what
    return found


@pytest.mark.parametrize("P", PS)
def test_reductions_count_every_row_once(P, mpi_json):
    r = results(P, mpi_json)
    for what in ("row_ids", "dot", "norm", "gram", "gram_xx", "dot_vector", "norm_torch32",
                 "allreduce_count", "allreduce_array", "allreduce_max"):
        for k in keys(r, P, what):
            assert r[k] < 1e-12, (k, r[k])
    for k in keys(r, P, "same_bits"):
        assert r[k] is True, k


@pytest.mark.parametrize("P", PS)
def test_rows_by_id(P, mpi_json):
    r = results(P, mpi_json)
    for what in ("fetch_rows", "fetch_rows_vector", "allgather_rows", "allgather_vector"):
        for k in keys(r, P, what):
            assert r[k] == 0.0, (k, r[k])


@pytest.mark.parametrize("P", PS)
def test_qr(P, mpi_json):
    r = results(P, mpi_json)
    for k in keys(r, P, "qr_"):
        limit = 1e-5 if k.endswith("cond1e10:r_rel") else 1e-12
        if k.endswith("same_bits"):
            assert r[k] is True, k
        else:
            assert r[k] < limit, (k, r[k])


@pytest.mark.parametrize("P", PS)
def test_vectors_and_spmm_t(P, mpi_json):
    r = results(P, mpi_json)
    for k in keys(r, P, "vector_shapes"):
        assert r[k] is True, k
    for what in ("vector_values", "spmm_t_value", "spmm_t_grad", "spmm_spmm_t_grad",
                 "spmm_t_vector_grad"):
        for k in keys(r, P, what):
            assert r[k] < 1e-12, (k, r[k])


@pytest.mark.parametrize("P", PS)
def test_normalize_and_gradient_allreduce(P, mpi_json):
    r = results(P, mpi_json)
    for what in ("normalize_gcn", "normalize_mean", "normalize_mean_rect", "grad_weight",
                 "grad_bias"):
        for k in keys(r, P, what):
            assert r[k] < 1e-10, (k, r[k])


def test_first_operator_sets_the_fair_share_of_threads(mpi_json):
    """numba starts one thread per core in each rank; the first operator applies
    ``default_threads`` ($SPMMGNN_THREADS=1 under tests/mpi.py)."""
    r = results(3, mpi_json)
    assert r["threads_before"] > 1
    assert r["threads_after"] == 1


EXPECTED_ERRORS = {
    "err_gather_side": ["gather_rows", "pass side='input'"],
    "err_scatter_side": ["scatter_rows", "pass side='output'"],
    "err_sparse_x": ["matmul", "scipy sparse", "toarray()"],
    "err_bfloat16": ["matmul", "bfloat16", "x.float()"],
    "err_bfloat16_dot": ["dot", "bfloat16", "x.float()"],
    "err_fetch_ids": ["fetch_rows", "ids must lie in"],
    "err_allreduce_shape": ["allreduce", "disagree"],
    "err_gcn_rect": ["normalize='gcn'", "square"],
}


@pytest.mark.parametrize("P", PS)
@pytest.mark.parametrize("case", sorted(EXPECTED_ERRORS))
def test_errors_name_the_fix(P, case, mpi_json):
    r = results(P, mpi_json)
    for k in keys(r, P, case):
        msgs = r[k]
        if case == "err_allreduce_shape" and P == 1:
            assert msgs == [None]
            continue
        assert len(msgs) == P and all(m is not None for m in msgs), (k, msgs)
        assert len(set(msgs)) == 1, (k, msgs)  # the same line on every rank
        for fragment in EXPECTED_ERRORS[case]:
            assert fragment in msgs[0], (k, fragment, msgs[0])
        assert "\n" not in msgs[0] and not math.isnan(len(msgs[0]))
