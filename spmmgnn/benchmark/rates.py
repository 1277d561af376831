"""The machine's rates, measured in the run that uses them: the floors a benchmark holds its
times against.

- ``copy_bandwidth``: a streaming copy, numpy on one thread or numba on several (GB/s read +
  written);
- ``triad_rate``: ``a = b + s c`` over arrays 8x the last-level cache (GB/s read + written);
- ``gemm_rates``: a square float32 product with numpy's BLAS and with torch's (GFLOP/s);
- ``gather_rates``: reading random rows of x, the local SpMM's bound (GB/s of rows read),
  x in the last-level cache and in DRAM, at each width;
- the network's alpha and beta: ``benchmark.network``; the local kernel's non-zeros x
  columns per second: ``benchmark.costs.measure_rate``.

Each is the best of ``repeat`` calls after a warm-up; the thread count is the caller's
(``spmmgnn.set_threads``) unless given.
"""

from __future__ import annotations

import numpy as np

from ..local.kernels import LLC_BYTES, PREFETCH_DISTANCE, prefetch_row
from ..runtime.jit import njit, prange
from .harness import interleaved, seconds

ITEM = 4  # float32
WIDTHS = (16, 32, 64, 128, 256)


@njit(parallel=True, cache=True, nogil=True)
def _parallel_copy(src, dst):
    for i in prange(src.shape[0]):
        dst[i] = src[i]


@njit(parallel=True, cache=True, nogil=True, boundscheck=False)
def _triad(a, b, c, s):
    for i in prange(a.shape[0]):
        a[i] = b[i] + s * c[i]


@njit(parallel=True, cache=True, nogil=True, boundscheck=False)
def _gather_sum(x, idx, acc):
    """acc[c] += x[idx[k]] over chunk c of idx: reads random rows of x and nothing else (the
    SpMM's prefetch, one accumulator row per chunk)."""
    n_chunks = acc.shape[0]
    f = x.shape[1]
    per = (idx.shape[0] + n_chunks - 1) // n_chunks
    last = idx.shape[0] - 1
    for c in prange(n_chunks):
        for k in range(c * per, min(idx.shape[0], (c + 1) * per)):
            prefetch_row(x, idx[min(k + PREFETCH_DISTANCE, last)])
            j = idx[k]
            for t in range(f):
                acc[c, t] += x[j, t]


def _set_threads(threads: int | None) -> None:
    if threads is not None:
        from ..runtime.threads import set_threads

        set_threads(threads)


def copy_bandwidth(threads: int | None = None, mbytes: int = 256, repeat: int = 5) -> float:
    """Streaming copy GB/s (bytes read + written): numpy's ``copyto`` on one thread when
    ``threads`` is None, else a numba copy on ``threads`` threads."""
    src = np.ones(mbytes * 2**20 // ITEM, dtype=np.float32)
    dst = np.empty_like(src)
    if threads is None:
        fn = lambda: np.copyto(dst, src)  # noqa: E731
    else:
        _set_threads(threads)
        fn = lambda: _parallel_copy(src, dst)  # noqa: E731
    return 2 * src.nbytes / interleaved({"copy": fn}, repeat)["copy"] / 1e9


def triad_rate(threads: int | None = None, repeat: int = 3) -> float:
    """GB/s (read + written) of ``a = b + s c`` over arrays 8x the last-level cache."""
    _set_threads(threads)
    n = max(1 << 22, 8 * LLC_BYTES // ITEM)
    a, b, c = np.zeros(n, np.float32), np.ones(n, np.float32), np.ones(n, np.float32)
    s = np.float32(0.5)
    _triad(a, b, c, s)
    best = min(seconds(lambda: _triad(a, b, c, s)) for _ in range(repeat))
    return 3 * n * ITEM / best / 1e9


def gemm_rates(n: int, threads: int, repeat: int = 3) -> dict[str, float]:
    """GFLOP/s of an n^3 float32 product on ``threads`` threads, numpy's BLAS and torch's."""
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(threads)
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    out = {}
    with threadpool_limits(limits=threads, user_api="blas"):
        for name, fn in (("numpy", lambda: a @ b), ("torch", lambda: ta @ tb)):
            fn()
            out[name] = 2 * n ** 3 / min(seconds(fn) for _ in range(repeat)) / 1e9
    return out


def gather_rates(threads: int, repeat: int, quick: bool = False,
                 widths=WIDTHS) -> dict[str, dict[int, float]]:
    """GB/s of random-row gathers of x at each width: x in a quarter of the last-level
    cache (``L3``) and in 8x it (``DRAM``)."""
    _set_threads(threads)
    out: dict[str, dict[int, float]] = {"L3": {}, "DRAM": {}}
    rng = np.random.default_rng(0)
    for regime, size in (("L3", LLC_BYTES // 4), ("DRAM", 8 * LLC_BYTES)):
        for f in widths:
            rows = max(1, size // (ITEM * f))
            x = rng.standard_normal((rows, f)).astype(np.float32)
            idx = rng.integers(0, rows, 200_000 if quick else 2_000_000).astype(np.int32)
            acc = np.zeros((4 * threads, f), dtype=np.float32)
            best = interleaved({"g": lambda x=x, idx=idx, acc=acc: _gather_sum(x, idx, acc)},
                               repeat)["g"]
            out[regime][f] = idx.size * f * ITEM / best / 1e9
    return out
