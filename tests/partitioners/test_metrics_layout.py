"""Partition metrics against a brute-force count, and block layouts."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import scipy.sparse as sp

from spmmgnn import Partition, SpmmgnnError
from spmmgnn.layout import resolve_partition
from spmmgnn.partitioners import metrics

from ..brute import brute_metrics


@pytest.mark.parametrize("seed", range(12))
def test_metrics_equal_brute_force(seed):
    """Every metric against the literal count, on directed and symmetric matrices with and
    without a diagonal, empty rows, 1 to 59 vertices and 1 to 8 parts (some empty)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    k = int(rng.integers(1, 9))
    A = sp.random_array((n, n), density=rng.uniform(0, 0.3), rng=rng, format="csr")
    if seed % 2:
        A = A + A.T
    if seed % 3 == 0:
        A = A + sp.eye_array(n)
    A = sp.csr_array(A)
    if seed % 4 and n > 4:
        keep = np.ones(n)
        keep[rng.choice(n, seed % 4, replace=False)] = 0
        A = sp.csr_array(sp.diags_array(keep) @ A)
    parts = rng.integers(0, k, n)
    m = metrics(A, parts, k, pairs=True)
    total, send, recv, nnz = brute_metrics(A, parts, k)
    assert m.total_volume == total
    assert m.send_volume.tolist() == send.tolist()
    assert m.recv_volume.tolist() == recv.tolist()
    assert m.nnz.tolist() == nnz.astype(int).tolist()
    assert m.pair_volume.sum(axis=1).tolist() == send.tolist()
    assert m.pair_volume.sum(axis=0).tolist() == recv.tolist()
    assert np.all(np.diag(m.pair_volume) == 0)
    avg = send.mean()
    assert m.send_imbalance == pytest.approx(send.max() / avg - 1 if avg else 0.0)


def count_python_lines(fn, prefix: str) -> int:
    """Lines of Python executed inside modules whose file path contains ``prefix`` (a
    per-non-zero loop executes at least one line per non-zero; numpy calls execute none)."""
    count = 0

    def tracer(frame, event, arg):
        nonlocal count
        if prefix not in frame.f_code.co_filename:
            return None
        if event == "line":
            count += 1
        return tracer

    sys.settrace(tracer)
    try:
        fn()
    finally:
        sys.settrace(None)
    return count


def test_metrics_scale_is_vectorized():
    """Timing-free: the Python lines executed do not grow with the non-zeros (10x more
    non-zeros, same lines; a per-non-zero or per-vertex loop would add >= 10^5 lines)."""
    rng = np.random.default_rng(0)
    lines = []
    for n, m in ((20_000, 200_000), (200_000, 2_000_000)):
        A = sp.csr_array((np.ones(m), (rng.integers(0, n, m), rng.integers(0, n, m))),
                         shape=(n, n))
        parts = rng.integers(0, 64, n)
        lines.append(count_python_lines(lambda A=A, parts=parts: metrics(A, parts, 64),
                                        "spmmgnn"))
    assert lines[0] > 0  # the tracer sees the library
    assert lines[1] <= lines[0] + 50 and lines[1] < 5_000, lines


def test_partition_from_parts_relabels_stably():
    p = Partition.from_parts([2, 0, 2, 1, 0], 4)
    assert p.perm.tolist() == [1, 4, 3, 0, 2]
    assert p.offsets.tolist() == [0, 2, 3, 5, 5]
    assert p.iperm[p.perm].tolist() == list(range(5))


def test_contiguous_blocks_first_get_extra_row():
    assert Partition.contiguous(10, 4).sizes.tolist() == [3, 3, 2, 2]
    assert Partition.contiguous(2, 4).sizes.tolist() == [1, 1, 0, 0]


def test_resolve_partition_rules():
    assert resolve_partition([1, 2, 3], 6, 3).sizes.tolist() == [1, 2, 3]
    assert resolve_partition([0, 1, 1, 0], 4, 2).sizes.tolist() == [2, 2]
    with pytest.raises(SpmmgnnError, match="ambiguous"):
        resolve_partition([0, 1, 2], 3, 3)
    with pytest.raises(SpmmgnnError, match="length"):
        resolve_partition([0, 1], 5, 3)
    with pytest.raises(SpmmgnnError, match="sum to"):
        resolve_partition([1, 1, 1], 4, 3)
    with pytest.raises(SpmmgnnError, match="integer"):
        resolve_partition(np.array([0.5, 1, 0, 1]), 4, 2)


@pytest.mark.parametrize("shape", [(2, 2), (1, 4), (2, 1, 2), (1, 2, 2), (2, 2, 2)])
def test_grid_metrics_against_sets(shape):
    """The 2D/3D metrics from the one-pass kernel equal a literal count with Python sets: the
    tile of (r, c) is (i(r), j(c), l(c)); expand = its columns owned elsewhere, fold = its rows
    owned in another fiber, fiber = (row, layer) pairs off the row's own layer."""
    from spmmgnn.benchmark.volumes import grid_metrics

    P = int(np.prod(shape))
    pr, pc, pl = (*shape, 1) if len(shape) == 2 else shape
    rng = np.random.default_rng(P)
    n = 47
    A = sp.random(n, n, density=0.12, random_state=3, format="coo")
    parts = rng.integers(0, P, n)
    got = grid_metrics(A.tocsr(), parts, shape)

    def coords(p):
        return p // (pc * pl), (p // pl) % pc, p % pl

    expand, fold, fiber = [set() for _ in range(P)], [set() for _ in range(P)], \
        [set() for _ in range(P)]
    for r, c in zip(A.row, A.col, strict=True):
        (ir, jr, lr), (_, jc, lc) = coords(parts[r]), coords(parts[c])
        tile = (ir * pc + jc) * pl + lc
        if parts[c] != tile:
            expand[tile].add(c)
        if jc != jr:
            fold[tile].add(r)
        if lc != lr:
            fiber[(ir * pc + jr) * pl + lc].add(r)
    assert got["expand"].tolist() == [len(s) for s in expand]
    assert got["fold"].tolist() == [len(s) for s in fold]
    if pl > 1:
        assert got["fiber"].tolist() == [len(s) for s in fiber]


def test_summa_bytes_are_cagnets_2d_cost():
    """oblivious2d on a 2 x 2 grid with even blocks: what a rank receives per call is
    CAGNET's SUMMA (the tiles of its process row it does not hold, 3 words of 4 bytes per
    non-zero, and the blocks H[I_k, F_j] of the other process rows) plus the two layout
    conversions of the 1D row contract, counted here by hand."""
    from spmmgnn.benchmark.volumes import Layout, predict

    n, f, P = 64, 8, 4
    A = sp.random(n, n, density=0.1, random_state=7, format="csr")
    layout = Layout.build(A, None, P)
    got = predict("oblivious2d", layout, P, 1, f, 4, shape=(2, 2)).received
    rows = [range(0, 32), range(32, 64)]          # process rows I_0, I_1 (parts 0-1, 2-3)
    Ad = A.toarray()
    for r in range(P):
        i, j = divmod(r, 2)
        tiles = sum(np.count_nonzero(Ad[np.ix_(rows[i], rows[k])]) for k in (0, 1)
                    if k % 2 != j)                 # held by (i, k mod 2): not mine
        summa = 3 * 4 * tiles + 32 * (f // 2) * 4  # + the other process row's H block
        conversions = 16 * (f // 2) * 4 + 16 * (f // 2) * 4
        assert got[r] == summa + conversions, r
