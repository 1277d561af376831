"""featureparallel (MixGCN's mixture of parallelism) at P = 2, 3, 4.

Values against scipy for ``A @ X`` and ``A.T @ Y`` (non-symmetric, uneven blocks with an empty
one, rectangular; fewer feature columns than ranks; float32); bytes per rank against the model
written out here: rank p owns feature columns ``f // P + (p < f % P)`` and sends
``n_p (f - f_p) + (m - m_p) f_p`` elements per matmul (m and n swap for matmul_t), receiving
``(n - n_p) f_p + m_p (f - f_p)``. A memory budget below the estimate is refused on every rank.
"""

from __future__ import annotations

import re

import numpy as np
import pytest


def results(P, mpi_json):
    return mpi_json(P, "featureparallel_cases.py")


@pytest.mark.parametrize("P", [2, 3, 4])
def test_featureparallel_equals_scipy(P, mpi_json):
    for r in results(P, mpi_json)["runs"]:
        A, f = np.array(r["A"]), r["f"]
        X = np.random.default_rng(1).standard_normal((A.shape[1], f))
        Y = np.random.default_rng(2).standard_normal((A.shape[0], f))
        tol = 1e-12 if r["itemsize"] == 8 else 1e-4
        label = f"{r['case']} f={f} itemsize={r['itemsize']}"
        if r["itemsize"] == 4:
            X, Y = X.astype(np.float32).astype(np.float64), Y.astype(np.float32).astype(np.float64)
        np.testing.assert_allclose(r["z"], A @ X, atol=tol, rtol=tol, err_msg=label)
        np.testing.assert_allclose(r["t"], A.T @ Y, atol=tol, rtol=tol, err_msg=label)


@pytest.mark.parametrize("P", [2, 3, 4])
def test_featureparallel_bytes_equal_the_model(P, mpi_json):
    for r in results(P, mpi_json)["runs"]:
        f, item = r["f"], r["itemsize"]
        fp = np.array([f // P + (p < f % P) for p in range(P)])
        n_p, m_p = np.diff(r["col_offsets"]), np.diff(r["row_offsets"])
        n, m = n_p.sum(), m_p.sum()
        sent = [x["fwd"][0] for x in r["ranks"]]
        recv = [x["fwd"][1] for x in r["ranks"]]
        assert sent == ((n_p * (f - fp) + (m - m_p) * fp) * item).tolist(), r["case"]
        assert recv == (((n - n_p) * fp + m_p * (f - fp)) * item).tolist(), r["case"]
        sent_t = [x["bwd"][0] for x in r["ranks"]]
        assert sent_t == ((m_p * (f - fp) + (n - n_p) * fp) * item).tolist(), r["case"]
        if n == m and f % P == 0:  # the form: two all-to-alls of n x f over P
            assert sum(sent) == 2 * n * f * (P - 1) // P * item


@pytest.mark.parametrize("P", [2, 3])
def test_featureparallel_refuses_what_does_not_fit(P, mpi_json):
    errors = results(P, mpi_json)["refusal"]
    assert len(errors) == P and len(set(errors)) == 1, errors
    assert errors[0].startswith("True: featureparallel replicates A on every rank: about")
    assert re.search(r"about [\d.,]+ [KMG]iB per rank", errors[0]), errors[0]
    assert "than the 1,000 B available per rank" in errors[0], errors[0]
