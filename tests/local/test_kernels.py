"""numba kernels against scipy/numpy, single process, 1, 2 and 3 threads.

Every kernel path (plain and column-blocked ``A @ X``; ``A.T @ Y`` through the transposed CSR
and through the scan split over columns x rows; scatter-add split over columns x rows) is
checked against scipy / ``np.add.at`` on random and power-law matrices, empty rows, empty
column blocks, f = 1, float32 and float64."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from spmmgnn import set_threads
from spmmgnn.local import kernels, local_matrix
from spmmgnn.local.column_blocks import ColumnBlocks
from spmmgnn.local.local_matrix import LocalCSR
from spmmgnn.local.split import split_block_columns, split_columns
from spmmgnn.runtime.errors import SpmmgnnError
from spmmgnn.runtime.threads import get_threads


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


def random_matrix(n=400, m=350, density=0.03, seed=3):
    """Uniform random pattern with ~40 empty rows and a band of empty columns [100, 180)."""
    A = sp.csr_array(sp.random(n, m, density=density, format="csr", random_state=seed))
    keep_rows = (np.arange(n) % 10 != 0).astype(float)               # empty rows
    keep_cols = ((np.arange(m) < 100) | (np.arange(m) >= 180)).astype(float)  # empty block
    A = sp.csr_array(sp.diags_array(keep_rows) @ A @ sp.diags_array(keep_cols))
    A.eliminate_zeros()
    return A


MATRICES = {"powerlaw": powerlaw_matrix, "random": random_matrix}


@pytest.mark.parametrize("kind", sorted(MATRICES))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("f", [1, 5, 40])
def test_every_kernel_path_equals_scipy(threads, monkeypatch, kind, dtype, f):
    A = MATRICES[kind]()
    if kind == "random":
        assert np.any(np.diff(A.indptr) == 0) and A[:, 100:180].nnz == 0
    rng = np.random.default_rng(f)
    X = rng.standard_normal((A.shape[1], f)).astype(dtype)
    Y = rng.standard_normal((A.shape[0], f)).astype(dtype)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    want, want_t = A.astype(dtype) @ X, A.T.astype(dtype) @ Y
    # a 256-byte "cache" makes every case blocked: x's rows span >= 19 column blocks, some
    # of them empty in the random matrix
    monkeypatch.setattr(kernels, "LLC_BYTES", 256)
    monkeypatch.setattr(local_matrix, "MEASURE_MIN_WORK", 1)  # auto times even these
    got, got_t = {}, {}
    for kernel in ("plain", "unrolled", "vector", "blocked", "blocked:3", "rule", "auto"):
        M = LocalCSR(A)
        M.kernel = kernel
        out = np.full((A.shape[0], f), 7, dtype=dtype)
        M.matmul(X, out, accumulate=False)
        np.testing.assert_allclose(out, want, rtol=tol, atol=tol * 10)
        acc = out.copy()
        M.matmul(X, acc, accumulate=True)
        np.testing.assert_allclose(acc, 2 * want, rtol=tol, atol=tol * 20)
        got[kernel] = (out, acc)
        (choice,) = M.choices.values()
        assert choice.source == {"rule": "rule", "auto": "measured"}.get(kernel, "forced")
        if kernel == "blocked":
            assert choice.variant == f"blocked:{M.llc_blocks(f, X.itemsize)}"
        if kernel == "auto":
            assert set(choice.seconds) == set(M.candidates(f, X.itemsize))
            assert choice.variant in choice.seconds
    for kernel_t in ("transpose", "scan", "auto"):
        M = LocalCSR(A)
        M.kernel_t = kernel_t
        outt = np.full((A.shape[1], f), -3, dtype=dtype)
        M.t_matmul(Y, outt, accumulate=False)
        np.testing.assert_allclose(outt, want_t, rtol=tol, atol=tol * 10)
        acc = outt.copy()
        M.t_matmul(Y, acc, accumulate=True)
        np.testing.assert_allclose(acc, 2 * want_t, rtol=tol, atol=tol * 20)
        got_t[kernel_t] = (outt, acc)
    # every variant adds each row's terms in the same order: bitwise the same numbers
    for table in (got, got_t):
        first = next(iter(table.values()))
        for name, pair in table.items():
            for a, b in zip(pair, first, strict=True):
                assert np.array_equal(a, b), name
    M = LocalCSR(A)
    data = M.data(dtype)
    for n_par, n_rp in [(1, 1), (1, 3), (2, 2), (1, 7)]:
        outt = np.full((A.shape[1], f), 5, dtype=dtype)
        kernels.csr_t_matmul(M.indptr, M.indices, data, Y, outt, False, min(n_par, f), n_rp)
        np.testing.assert_allclose(outt, want_t, rtol=tol, atol=tol * 10)


@pytest.mark.parametrize("f", [1, 3, 20])
def test_scatter_add_every_split(threads, f):
    rng = np.random.default_rng(f)
    idx = np.concatenate([rng.integers(0, 60, 300), [59, 59, 0]])  # repeats, both ends
    src = rng.standard_normal((idx.size, f))
    ref = np.ones((61, f))  # row 60 never hit
    np.add.at(ref, idx, src)
    for n_rp in (0, 1, 2, 5):
        acc = np.ones((61, f))
        kernels.scatter_add(src, idx, acc, kernels.column_split(f), n_rp)
        np.testing.assert_allclose(acc, ref, rtol=1e-12)
    assert kernels.row_split(1) == threads and kernels.row_split(threads) == 1


@pytest.mark.parametrize("f", [1, 5, 64])
def test_scatter_add_of_selected_rows_is_gather_then_add(threads, f):
    """``sel``: the adds of gathering src[sel] first, bit for bit, at every split."""
    rng = np.random.default_rng(10 + f)
    idx = rng.integers(0, 900, 5000)
    sel = rng.integers(0, 300, idx.size)
    src = rng.standard_normal((300, f))
    for n_rp in (0, 1, 3):
        ref, got = np.ones((900, f)), np.ones((900, f))
        kernels.scatter_add(src[sel], idx, ref, kernels.column_split(f), n_rp)
        kernels.scatter_add(src, idx, got, kernels.column_split(f), n_rp, sel=sel)
        np.testing.assert_array_equal(got, ref)


def test_column_blocks_layout_and_policy(monkeypatch):
    A = sp.csr_array(np.array([[1, 0, 2, 0, 0, 3],
                               [0, 0, 0, 0, 0, 0],
                               [5, 0, 0, 4, 6, 0]], dtype=float))
    b = ColumnBlocks(LocalCSR(A), 3)  # blocks of 2 columns: {0, 1}, {2, 3}, {4, 5}
    assert b.indptr2.tolist() == [[0, 1, 1, 2], [2, 3, 3, 4], [4, 5, 5, 6]]
    assert b.indices.tolist() == [0, 0, 2, 3, 5, 4]
    assert b.data(np.float32).tolist() == [1, 5, 2, 4, 3, 6]
    assert b.chunks().shape[0] == 3
    # policy: blocks = ceil(x bytes / (LLC / 4)), at most nnz / rows / 2, none when the
    # columns a quarter LLC holds carry half the non-zeros
    monkeypatch.setattr(kernels, "LLC_BYTES", 2**19)
    dense = LocalCSR(sp.csr_array(np.ones((10, 1000))))
    assert dense.col_blocks(16, 8) == 1      # 128,000 bytes <= 131,072
    assert dense.col_blocks(64, 8) == 4      # 512,000 bytes; 256 of 1000 columns hold 26 %
    assert dense.col_blocks(256, 8) == 16
    assert dense.col_blocks(32, 8) == 1      # 2 blocks, but 512 columns hold 51 %
    assert dense.hot_share(512) == pytest.approx(0.512)
    sparse = LocalCSR(sp.csr_array(sp.eye(1000)))
    assert sparse.col_blocks(256, 8) == 1    # 1 non-zero per row cannot feed 16 blocks
    assert sparse.llc_blocks(256, 8) == 16  # what kernel="blocked" uses
    seven = sp.csr_array((np.ones(700), (np.repeat(np.arange(100), 7), np.arange(700))),
                         shape=(100, 1000))
    assert LocalCSR(seven).col_blocks(256, 8) == 3  # 7 per row: capped at 7 // 2
    skewed = sp.csr_array((np.ones(700), (np.repeat(np.arange(100), 7), np.arange(700) % 40)),
                          shape=(100, 1000))
    assert LocalCSR(skewed).col_blocks(256, 8) == 1  # 40 hot columns carry every non-zero


def test_empty_matrices_every_path(monkeypatch):
    monkeypatch.setattr(kernels, "LLC_BYTES", 64)
    for shape in [(0, 5), (5, 0), (0, 0), (4, 4)]:
        for kernel, kernel_t in (("plain", "transpose"), ("blocked", "scan"), ("auto", "auto")):
            M = LocalCSR(sp.csr_array(shape))
            M.kernel, M.kernel_t = kernel, kernel_t
            out = np.full((shape[0], 2), 9.0)
            M.matmul(np.ones((shape[1], 2)), out, accumulate=False)
            assert np.all(out == 0)
            outt = np.full((shape[1], 2), 9.0)
            M.t_matmul(np.ones((shape[0], 2)), outt, accumulate=False)
            assert np.all(outt == 0)


def test_kernel_setting_from_the_environment(monkeypatch):
    """$SPMMGNN_KERNEL / $SPMMGNN_KERNEL_T force a variant for every LocalCSR without its
    own setting; a setting that names no variant is refused with the choices."""
    A = sp.csr_array(sp.random(50, 40, density=0.2, random_state=1))
    X, Y = np.ones((40, 3)), np.ones((50, 3))
    monkeypatch.setenv("SPMMGNN_KERNEL", "blocked:2")
    monkeypatch.setenv("SPMMGNN_KERNEL_T", "scan")
    M = LocalCSR(A)
    M.matmul(X, np.empty((50, 3)), accumulate=False)
    M.t_matmul(Y, np.empty((40, 3)), accumulate=False)
    assert [(c.variant, c.source) for c in M.choices.values()] == [
        ("blocked:2", "forced"), ("scan", "forced")]
    assert M.transposed is None  # scan needs no transposed copy
    M.kernel = "plain"  # the attribute wins over the environment
    M.matmul(np.ones((40, 5)), np.empty((50, 5)), accumulate=False)
    assert M.choices[(5, "<f8", get_threads())].variant == "plain"
    monkeypatch.setenv("SPMMGNN_KERNEL", "fastest")
    with pytest.raises(SpmmgnnError, match="'fastest'.*auto, rule, plain, unrolled, blocked"):
        LocalCSR(A).matmul(X, np.empty((50, 3)), accumulate=False)


def test_transpose_choice_times_a_row_sample_of_a_large_block(monkeypatch):
    """Above ``2 * SAMPLE_WORK`` the A^T choice (transpose vs scan) times evenly spaced runs
    of whole rows (all columns kept) and reports the share; the matmul choice times the whole
    matrix (share 1); both results are A x and A^T y."""
    A = powerlaw_matrix(2000, seed=3).astype(np.float64)
    f = 8
    monkeypatch.setattr(local_matrix, "MEASURE_MIN_WORK", 1)
    monkeypatch.setattr(local_matrix, "SAMPLE_WORK", A.nnz * f // 10)
    M = LocalCSR(A)
    sample = M.row_sample(f)
    assert sample is not M and sample.shape[1] == A.shape[1]
    rows = sample.sample_rows
    assert np.all(np.diff(rows) > 0) and rows.size < A.shape[0]
    assert (sample.to_scipy() != A[rows]).nnz == 0  # whole rows, unchanged
    assert 0.05 < sample.nnz / A.nnz < 0.3
    assert M.row_sample(1000 * f) is not M
    monkeypatch.setattr(local_matrix, "SAMPLE_WORK", A.nnz * f)
    assert M.row_sample(f) is M  # one call is at most twice the sample work: timed whole
    monkeypatch.setattr(local_matrix, "SAMPLE_WORK", A.nnz * f // 10)
    rng = np.random.default_rng(0)
    X, Y = rng.standard_normal((A.shape[1], f)), rng.standard_normal((A.shape[0], f))
    out, out_t = np.empty((A.shape[0], f)), np.empty((A.shape[1], f))
    M.matmul(X, out, accumulate=False)
    M.t_matmul(Y, out_t, accumulate=False)
    np.testing.assert_allclose(out, A @ X, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out_t, A.T @ Y, rtol=1e-12, atol=1e-12)
    for c in M.choices.values():
        assert c.source == "measured" and c.variant in c.seconds
    (fwd, fwd_c), (t, t_c) = M.choices.items()
    assert fwd_c.sample == 1.0 and 0 < t_c.sample < 0.3
    assert {r["sample"] for r in M.kernel_report()} == {1.0, t_c.sample}


def test_count_nonfinite_sees_every_nan_and_inf():
    """The per-call input check: NaN, +Inf and -Inf anywhere, float32 and float64, strided
    input; the largest finite values and subnormals are finite."""
    for dtype in (np.float32, np.float64):
        info = np.finfo(dtype)
        x = np.random.default_rng(0).standard_normal((257, 5)).astype(dtype)
        x[0, 0], x[1, 1] = info.max, -info.max
        x[2, 2] = info.smallest_subnormal
        assert kernels.count_nonfinite(x) == 0
        x[3, 3], x[100, 4], x[256, 0] = np.nan, np.inf, -np.inf
        assert kernels.count_nonfinite(x) == 3
        assert kernels.count_nonfinite(x[:, ::2]) == int((~np.isfinite(x[:, ::2])).sum())
        assert kernels.count_nonfinite(x[:0]) == 0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("f", [1, 5])
def test_serial_twins_give_the_parallel_kernels_bits(threads, monkeypatch, dtype, f):
    """A small product (below ``kernels.SERIAL_WORK``) or one on one thread runs the serial
    twin of its variant; twin and parallel kernel add the same terms in the same order, so
    they give bitwise the same numbers, with accumulate, empty rows and columns too."""
    A = random_matrix()
    rng = np.random.default_rng(f)
    X = rng.standard_normal((A.shape[1], f)).astype(dtype)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    ran = []
    for name in ("csr_matvec_serial", "csr_matmul_serial"):
        real = getattr(kernels, name)
        monkeypatch.setattr(kernels, name, lambda *a, _real=real, _name=name: (
            ran.append(_name), _real(*a))[1])
    for variant in ("plain", "unrolled", "vector"):
        got = {}
        for serial_work in (0, 1 << 62):  # never (unless on one thread), always
            monkeypatch.setattr(kernels, "SERIAL_WORK", serial_work)
            ran.clear()
            M = LocalCSR(A)
            M.kernel = variant
            out = np.full((A.shape[0], f), 7, dtype=dtype)
            M.matmul(X, out, accumulate=False)
            acc = out.copy()
            M.matmul(X, acc, accumulate=True)
            np.testing.assert_allclose(out, A.astype(dtype) @ X, rtol=tol, atol=tol * 10)
            np.testing.assert_allclose(acc, 2 * out, rtol=tol, atol=tol * 10)
            assert len(ran) == (2 if serial_work or threads == 1 else 0), (variant, ran)
            got[serial_work] = (out, acc)
        for a, b in zip(got[0], got[1 << 62], strict=True):
            assert np.array_equal(a, b), variant
    rows = rng.integers(0, A.shape[1], 500)  # repeats
    packed = {}
    for kernel in (kernels.gather_rows_kernel, kernels.gather_rows_serial):
        packed[kernel] = np.empty((rows.size, f), dtype=dtype)
        kernel(X, rows, packed[kernel])
        assert np.array_equal(packed[kernel], X[rows])
    src = packed[kernels.gather_rows_serial]
    added = []
    for run in (lambda o: kernels.scatter_add_kernel(src, rows, o, 1, 1, kernels.NO_SEL),
                lambda o: kernels.scatter_add_serial(src, rows, o, kernels.NO_SEL),
                lambda o: kernels.scatter_add(src, rows, o, 1)):  # (the twin: below 2^62)
        out = np.ones_like(X)
        run(out)
        added.append(out)
    ref = np.ones_like(X)
    np.add.at(ref, rows, src)
    np.testing.assert_allclose(added[0], ref, rtol=tol, atol=tol * 10)
    assert all(np.array_equal(a, added[0]) for a in added)


def test_renamed_matrix_multiplies_bit_for_bit_and_follows_keep_values(threads):
    """``LocalCSR.renamed``: columns moved to other rows of a bigger x, terms in the same
    order, so the product equals the original's bit for bit (no column blocking, even when
    forced); ``keep_values`` on the original frees the twin's other dtypes too."""
    rng = np.random.default_rng(5)
    A = sp.random(300, 200, density=0.05, random_state=6, format="csr")
    m = LocalCSR(A)
    new_col = rng.permutation(500)[:200]          # not increasing: rows' order must stay
    x = rng.standard_normal((200, 16))
    big = np.zeros((500, 16))
    big[new_col] = x
    twin = m.renamed(new_col, 500)
    for setting in ("auto", "blocked", "plain"):
        m.kernel = twin.kernel = setting
        m.choices.clear()
        twin.choices.clear()
        want, got = np.empty((300, 16)), np.empty((300, 16))
        m.matmul(x, want, accumulate=False)
        twin.matmul(big, got, accumulate=False)
        np.testing.assert_array_equal(got, want)
        assert not any(c.variant.startswith("blocked") for c in twin.choices.values())
    m.keep_values(np.float32)
    assert list(twin._data) == [np.dtype(np.float32)] and twin._source == np.float32
    got32, want32 = np.empty((300, 16), np.float32), np.empty((300, 16), np.float32)
    m.matmul(x.astype(np.float32), want32, accumulate=False)
    twin.matmul(big.astype(np.float32), got32, accumulate=False)
    np.testing.assert_array_equal(got32, want32)
