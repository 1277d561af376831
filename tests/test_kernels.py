"""numba kernels against scipy/numpy, single process, 1, 2 and 3 threads."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from spmmgnn import kernels, set_threads
from spmmgnn.local_matrix import LocalCSR, split_block_columns, split_columns


@pytest.fixture(params=[1, 2, 3])
def threads(request):
    assert set_threads(request.param) == request.param  # never clamped (see conftest)
    yield request.param
    set_threads(1)


def powerlaw_matrix(n=300, seed=0):
    rng = np.random.default_rng(seed)
    deg = np.minimum((rng.pareto(1.2, n) * 3).astype(int), n)
    rows = np.repeat(np.arange(n), deg)
    cols = rng.integers(0, n, rows.size)
    A = sp.csr_array((rng.standard_normal(rows.size), (rows, cols)), shape=(n, n + 7))
    A.sum_duplicates()
    return A


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("f", [1, 3, 16, 130])
def test_csr_matmul_and_transpose(threads, dtype, f):
    A = powerlaw_matrix()
    M = LocalCSR(A)
    rng = np.random.default_rng(1)
    X = rng.standard_normal((A.shape[1], f)).astype(dtype)
    Y = rng.standard_normal((A.shape[0], f)).astype(dtype)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    out = np.full((A.shape[0], f), 7, dtype=dtype)
    M.matmul(X, out, accumulate=False)
    np.testing.assert_allclose(out, A.astype(dtype) @ X, rtol=tol, atol=tol * 10)
    M.matmul(X, out, accumulate=True)
    np.testing.assert_allclose(out, 2 * (A.astype(dtype) @ X), rtol=tol, atol=tol * 20)
    outt = np.full((A.shape[1], f), -3, dtype=dtype)
    M.t_matmul(Y, outt, accumulate=False)
    np.testing.assert_allclose(outt, A.T.astype(dtype) @ Y, rtol=tol, atol=tol * 10)


def test_gather_and_scatter_add_with_repeats(threads):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((50, 20))
    idx = rng.integers(0, 50, 200)
    buf = np.empty((200, 20))
    kernels.gather_rows(x, idx, buf)
    np.testing.assert_array_equal(buf, x[idx])
    acc = np.zeros_like(x)
    kernels.scatter_add(buf, idx, acc, kernels.column_split(20))
    ref = np.zeros_like(x)
    np.add.at(ref, idx, x[idx])
    np.testing.assert_allclose(acc, ref, rtol=1e-12)


def test_row_chunks_cover_rows_and_balance_work():
    A = powerlaw_matrix(2000)
    for n_chunks in (1, 2, 7, 64, 5000):
        b = kernels.row_chunks(A.indptr, n_chunks)
        assert b[0] == 0 and b[-1] == A.shape[0] and np.all(np.diff(b) >= 0)
    b = kernels.row_chunks(A.indptr, 8)
    work = np.diff(A.indptr[b]) + np.diff(b)
    assert work.max() <= (A.nnz + A.shape[0]) / 8 + np.diff(A.indptr).max() + 1
    assert list(kernels.row_chunks(np.zeros(1, dtype=np.int64), 4)) == [0, 0]


def test_empty_matrices():
    for shape in [(0, 5), (5, 0), (0, 0), (4, 4)]:
        M = LocalCSR(sp.csr_array(shape))
        x = np.ones((shape[1], 3))
        out = np.full((shape[0], 3), 9.0)
        M.matmul(x, out, accumulate=False)
        assert np.all(out == 0)


def test_split_columns_diag_and_ghosts():
    A = sp.csr_array(np.array([[1, 0, 2, 0, 0, 3],
                               [0, 4, 0, 0, 0, 0],
                               [5, 0, 0, 0, 6, 0]], dtype=float))
    diag, ghost, ghost_ids = split_columns(A, lo=2, hi=4)
    assert ghost_ids.tolist() == [0, 1, 4, 5]  # column 3 is empty: not a ghost
    assert diag.to_scipy().toarray().tolist() == [[2, 0], [0, 0], [0, 0]]
    assert ghost.to_scipy().toarray().tolist() == [[1, 0, 0, 3], [0, 4, 0, 0], [5, 0, 6, 0]]
    blocks = split_block_columns(A, np.array([0, 2, 2, 6]))
    assert [b.shape for b in blocks] == [(3, 2), (3, 0), (3, 4)]
    assert sum(b.nnz for b in blocks) == A.nnz
