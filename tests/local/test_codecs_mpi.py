"""Codecs through the real row exchange of the sparse algorithms."""

from __future__ import annotations

import numpy as np
import pytest

from ..brute import step_bound


def results(P, algo, c, mpi_json):
    return mpi_json(P, "codec_cases.py", algo, str(c))


# Bytes per row for f = 40, written out by hand (not from the code's row_bytes):
# float32 4 B/value; float16 and bfloat16 2 B/value; intB: ceil(40 B / 8) bytes of values
# plus the per-row range, two bfloat16 numbers = 4 bytes.
ROW_BYTES_F40 = {"float32": 160, "float16": 80, "bfloat16": 80,
                 "int8": 40 + 4, "int4": 20 + 4, "int2": 10 + 4}
PARAM_BYTES = {"int8": 4, "int4": 4, "int2": 4}


def transpose_bound(A: np.ndarray, Y: np.ndarray, offsets: np.ndarray, qmax: int) -> np.ndarray:
    """Per output row c of A.T @ Y: each other block row b with a non-zero in column c sends
    its partial sum A[b, c].T @ Y[b] quantized with that row's own range."""
    n = A.shape[0]
    owner = np.searchsorted(offsets, np.arange(n), side="right") - 1
    bound = np.zeros(n)
    for b in range(offsets.size - 1):
        lo, hi = offsets[b], offsets[b + 1]
        partial = A[lo:hi].T @ Y[lo:hi]           # n x f, row c = b's contribution to c
        sends = (owner != b) & (np.abs(A[lo:hi]).sum(axis=0) > 0)
        bound[sends] += step_bound(partial[sends], qmax)
    return bound


def least_squares_scale(got: np.ndarray, exact: np.ndarray) -> float:
    """s minimizing |got - s exact|: 1 for unbiased rounding, 0.5 for a result half the size."""
    return float((got * exact).sum() / (exact * exact).sum())


@pytest.mark.parametrize(("P", "algo", "c"), [(3, "sparse1d", 1), (4, "sparse15d", 2)])
def test_codecs_through_the_exchange(P, algo, c, mpi_json):
    r = results(P, algo, c, mpi_json)
    A, X = np.array(r["A"]), np.array(r["X"], dtype=np.float32)
    exact, exact_t = A @ X, A.T @ X
    offsets = np.array(r["offsets"])
    assert set(ROW_BYTES_F40) == {res["codec"] for res in r["results"]}
    for res in r["results"]:
        name = res["codec"]
        y, t = np.array(res["y"]), np.array(res["t"])
        if name == "float32":
            np.testing.assert_allclose(y, exact, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(t, exact_t, rtol=1e-5, atol=1e-5)
        elif name.startswith("int"):
            qmax = 2 ** int(name[3:]) - 1
            # each fetched row is off by at most one step of its own range
            bound = np.abs(A) @ step_bound(X.astype(np.float64), qmax)
            assert np.all(np.abs(y - exact) <= bound[:, None] + 1e-5), name
            bound_t = transpose_bound(A, X.astype(np.float64), offsets, qmax)
            assert np.all(np.abs(t - exact_t) <= bound_t[:, None] + 1e-5), name
            # stochastic rounding is unbiased: no shrinking or growing of the result
            assert abs(least_squares_scale(y, exact) - 1) < 0.1, name
            assert abs(least_squares_scale(t, exact_t) - 1) < 0.1, name
        else:  # 16-bit floats: 2^-8 (bf16) or 2^-11 (fp16) relative per value
            rel = 2.0 ** -8 if name == "bfloat16" else 2.0 ** -11
            assert np.all(np.abs(y - exact) <= rel * (np.abs(A) @ np.abs(X)) + 1e-5), name
            assert np.all(np.abs(t - exact_t) <= rel * (np.abs(A.T) @ np.abs(X)) + 1e-5), name
        width = ROW_BYTES_F40[name]
        for st in res["ranks"]:
            if c == 1:  # 1D: rows on the wire are exactly the partition's volumes
                b = st["block"]
                assert st["fwd"]["bytes_sent"] == res["send"][b] * width
                assert st["fwd"]["bytes_received"] == res["recv"][b] * width
                assert st["bwd"]["bytes_sent"] == res["recv"][b] * width
            for d in ("fwd", "bwd"):
                s = st[d]
                assert s["payload_bytes_sent"] + s["param_bytes_sent"] == s["bytes_sent"]
                assert s["param_bytes_sent"] * width == s["bytes_sent"] * PARAM_BYTES.get(name, 0)


@pytest.mark.parametrize(("P", "algo", "grid"), [(4, "sparse2d", "2x2"), (4, "sparse3d", "2x1x2")])
def test_codecs_through_expand_and_fold(P, algo, grid, mpi_json):
    """The 2D/3D sparse algorithms encode twice per call (expand: rows of X; fold and, in 3D,
    the fiber step: partial sums): float32 is exact, 16-bit floats stay within two roundings
    per value, the integer codecs stay unbiased and int8 close; bytes split into payload and
    codec parameters as in 1D."""
    r = results(P, algo, grid, mpi_json)
    A, X = np.array(r["A"]), np.array(r["X"], dtype=np.float32)
    exact, exact_t = A @ X, A.T @ X
    scale = np.abs(A) @ np.abs(X)
    scale_t = np.abs(A.T) @ np.abs(X)
    assert set(ROW_BYTES_F40) == {res["codec"] for res in r["results"]}
    for res in r["results"]:
        name = res["codec"]
        y, t = np.array(res["y"]), np.array(res["t"])
        if name == "float32":
            np.testing.assert_allclose(y, exact, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(t, exact_t, rtol=1e-5, atol=1e-5)
        elif name.startswith("int"):
            assert abs(least_squares_scale(y, exact) - 1) < 0.1, name
            assert abs(least_squares_scale(t, exact_t) - 1) < 0.1, name
            if name == "int8":
                assert np.linalg.norm(y - exact) < 0.02 * np.linalg.norm(exact)
                assert np.linalg.norm(t - exact_t) < 0.02 * np.linalg.norm(exact_t)
        else:  # a rounding of X's rows, then of the partial sums they feed
            rel = 2.0 ** -8 if name == "bfloat16" else 2.0 ** -11
            assert np.all(np.abs(y - exact) <= 2.1 * rel * scale + 1e-5), name
            assert np.all(np.abs(t - exact_t) <= 2.1 * rel * scale_t + 1e-5), name
        width = ROW_BYTES_F40[name]
        for st in res["ranks"]:
            for d in ("fwd", "bwd"):
                s = st[d]
                assert s["bytes_sent"] % width == 0, (name, d)
                assert s["payload_bytes_sent"] + s["param_bytes_sent"] == s["bytes_sent"]
                assert s["param_bytes_sent"] * width == s["bytes_sent"] * PARAM_BYTES.get(name, 0)
