"""The row algebra under disagreeing ranks and in float32 (issue 46): the probes of the
third campaign that hung or mixed numbers, each one an mpiexec run (workers/
linalg_agreement.py), and the float64 accumulation and scaling of dot / norm / gram."""

from __future__ import annotations

import pytest

from ..mpi import run_mpi_json

COLLECTIVE_ERRORS = {
    "norm_bad_side_one_rank": "side must be 'input' or 'output'",
    "norm_sides_differ": "different side=",
    "dot_sides_differ": "different side=",
    "calls_differ": "call different methods",
    "widths_differ": "number of columns",
    "allreduce_shapes": "shape",
    "allreduce_ops": "op=",
    "dot_nan_one_rank": "NaN or Inf",
    "norm_nan_one_rank": "NaN or Inf",
    "dot_inf_in_y_only": "NaN or Inf",
    "norm_inf_one_rank": "NaN or Inf",
    "calls_differ_vectors": "call different methods",
    "dot_vector_nan_one_rank": "NaN or Inf",
}
RIGHT_NUMBERS = {  # case: the largest relative error allowed against float64 numpy
    "dot_x_or_copy": 1e-13, "gram_x_or_copy": 1e-13, "dot_after_errors": 1e-13,
    "allreduce_same": 0.0, "dot_float32": 1e-7, "norm_float32": 1e-7, "gram_float32": 1e-7,
    "norm_huge": 1e-13, "norm_tiny": 1e-13, "norm_huge_vector": 1e-13, "dot_overflow": 0.0,
    "dot_vector_paths_mixed": 1e-13, "norm_vector_paths_mixed": 1e-13,
    "dot_vector_short_path": 1e-13, "norm_vector_short_path": 1e-13,
    "dot_float32_vector_short_path": 1e-7, "norm_float32_vector_short_path": 1e-7,
    "norm_vector_zero_one_rank": 1e-13, "norm_vector_scaled_one_rank": 1e-13,
}


@pytest.fixture(scope="module", params=[2, 3])
def cases(request, tmp_path_factory):
    return run_mpi_json(request.param, "linalg_agreement.py",
                        tmp_path_factory.mktemp("agreement"), timeout=240)


@pytest.mark.parametrize("name", sorted(COLLECTIVE_ERRORS))
def test_disagreeing_ranks_raise_one_error_everywhere(cases, name):
    for got in cases[name]:
        assert got["raised"] and got["collective"], (name, got)
        assert COLLECTIVE_ERRORS[name] in got["message"], (name, got["message"])
    assert len({got["message"] for got in cases[name]}) == 1


@pytest.mark.parametrize("name", sorted(RIGHT_NUMBERS))
def test_right_numbers(cases, name):
    for got in cases[name]:
        assert not got["raised"], (name, got)
        assert got["error"] <= RIGHT_NUMBERS[name], (name, got["error"])


def test_float32_in_float32_out(cases):
    assert cases["dtype_out_values"] == ["float32", "float32", "float32"]
    assert cases["vector_dtypes"] == ["float32", "float32", "float64"]



def test_nan_and_inf_refused_in_one_process():
    """P = 1: a well-formed block skips the separate NaN/Inf scan in dot / norm (the sums show
    them) and in matmul's check; each still refuses NaN and Inf, also where Inf meets 0."""
    import numpy as np
    import scipy.sparse as sp

    import spmmgnn

    op = spmmgnn.DistSpMM.from_scipy(sp.eye(40, format="csr"), algorithm="sparse1d")
    x = np.random.default_rng(0).standard_normal((40, 2))
    assert np.allclose(op.dot(x, x), (x * x).sum(0))
    assert np.isinf(op.dot(x * 1e200, x * 1e200)).all()
    zero, bad = x.copy(), x.copy()
    zero[3], bad[3, 1] = 0.0, np.inf
    for call in (lambda: op.dot(zero, bad), lambda: op.dot(bad[:, 1], x[:, 1]),
                 lambda: op.norm(bad), lambda: op.norm(np.where(bad == np.inf, np.nan, bad)),
                 lambda: op.matmul(bad), lambda: op.matmul_t(bad)):
        with pytest.raises(spmmgnn.SpmmgnnError, match="NaN or Inf"):
            call()
