"""Communication metrics of a row partition (docs/metrics.md), vectorized.

For the matrix ``A`` that the SpMM applies (``A @ X``; this is ``A^T`` in the GCN equation
``Z = A^T H W``) and a part vector on its rows (which also places the rows of X):

* net of column c = {part[c]} U {part[r] : A[r, c] != 0};  lambda(c) = its number of parts;
* total volume = sum_c (lambda(c) - 1) rows of X per SpMM;
* send volume of p = sum over columns c owned by p of (lambda(c) - 1);
* receive volume of p = number of distinct non-owned columns in p's rows;
* imbalance = max / average - 1;  compute load of p = non-zeros in p's rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..runtime.jit import njit, prange
from ..runtime.threads import get_threads


def imbalance(values: np.ndarray) -> float:
    """max / average - 1 (0 for all-zero values)."""
    v = np.asarray(values, dtype=np.float64)
    avg = v.mean() if v.size else 0.0
    return float(v.max() / avg - 1.0) if avg > 0 else 0.0


@dataclass
class PartitionMetrics:
    k: int
    total_volume: int
    send_volume: np.ndarray
    recv_volume: np.ndarray
    nnz: np.ndarray
    rows: np.ndarray
    pair_volume: np.ndarray | None = None

    @property
    def max_send(self) -> int:
        return int(self.send_volume.max()) if self.k else 0

    @property
    def max_recv(self) -> int:
        return int(self.recv_volume.max()) if self.k else 0

    @property
    def send_imbalance(self) -> float:
        return imbalance(self.send_volume)

    @property
    def recv_imbalance(self) -> float:
        return imbalance(self.recv_volume)

    @property
    def load_imbalance(self) -> float:
        return imbalance(self.nnz)

    @property
    def rows_imbalance(self) -> float:
        """Of the rows per part: a training step's dense part runs at the largest's pace."""
        return imbalance(self.rows)

    def weighted_imbalance(self, row_weight: int) -> float:
        """Of the non-zeros + ``row_weight`` x rows per part (what ``partition(row_weight=)``
        balances)."""
        return imbalance(self.nnz + int(row_weight) * self.rows)

    def as_dict(self, per_part: bool = False) -> dict:
        d = dict(k=self.k, total_volume=int(self.total_volume), max_send=self.max_send,
                 send_imbalance=self.send_imbalance, max_recv=self.max_recv,
                 recv_imbalance=self.recv_imbalance, max_nnz=int(self.nnz.max()),
                 load_imbalance=self.load_imbalance, rows_imbalance=self.rows_imbalance)
        if per_part:
            d.update(send_volume=self.send_volume.tolist(), recv_volume=self.recv_volume.tolist(),
                     nnz=self.nnz.tolist(), rows=self.rows.tolist())
        return d


def cut_pairs(A, parts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (column c, receiving part p) pairs with p != part[c] and A[r, c] != 0 for
    some row r of p: each is one row of X sent from part[c] to p per SpMM."""
    A = sp.csr_array(A)
    parts = np.asarray(parts, dtype=np.int64)
    k = int(parts.max()) + 1 if parts.size else 1
    row_part = np.repeat(parts, np.diff(A.indptr))
    cols = A.indices.astype(np.int64)
    cut = row_part != parts[cols]
    keys = np.unique(cols[cut] * k + row_part[cut])
    return keys // k, keys % k


@njit(cache=True, parallel=True)
def _volumes(indptr, indices, parts, k, want_pairs, threads):
    """Send and receive volume per part, and the k x k pair matrix if asked (else 1 x 1),
    without materializing the cut pairs: the rows of each part are scanned with a stamp per
    column (a column counts once per receiving part), parts spread over the threads. Memory
    O(n + k^2) per thread besides the input."""
    n = parts.size
    counts = np.zeros(k + 1, dtype=np.int64)
    for v in range(n):
        counts[parts[v] + 1] += 1
    for p in range(k):
        counts[p + 1] += counts[p]
    rows = np.empty(n, dtype=np.int64)
    fill = counts[:k].copy()
    for v in range(n):
        rows[fill[parts[v]]] = v
        fill[parts[v]] += 1
    send = np.zeros((threads, k), dtype=np.int64)
    recv = np.zeros(k, dtype=np.int64)
    pair = np.zeros((k, k) if want_pairs else (1, 1), dtype=np.int64)
    stamp = np.full((threads, n), -1, dtype=np.int32)  # a part id: half the memory of int64
    for t in prange(threads):
        for p in range(t, k, threads):
            got = 0
            for i in range(counts[p], counts[p + 1]):
                r = rows[i]
                for j in range(indptr[r], indptr[r + 1]):
                    c = indices[j]
                    q = parts[c]
                    if q != p and stamp[t, c] != p:
                        stamp[t, c] = p
                        got += 1
                        send[t, q] += 1
                        if want_pairs:
                            pair[q, p] += 1
            recv[p] = got
    return send.sum(axis=0), recv, pair


def metrics(A, parts, k: int | None = None, pairs: bool = False) -> PartitionMetrics:
    """Metrics of part vector ``parts`` (length n, values in [0, k)) for square sparse ``A``.

    ``pairs=True`` also returns the k x k matrix ``pair_volume[p, q]`` = rows p sends to q.
    """
    A = sp.csr_array(A)
    n = A.shape[0]
    parts = np.asarray(parts, dtype=np.int64)
    if A.shape[0] != A.shape[1]:
        raise ValueError(f"A must be square, got shape {A.shape}")
    if parts.shape != (n,):
        raise ValueError(f"part vector has length {parts.shape} but A has {n} rows")
    k = int(k if k is not None else (parts.max() + 1 if n else 1))
    if n and (parts.min() < 0 or parts.max() >= k):
        raise ValueError(f"part vector values must lie in [0, {k})")
    send, recv, pair = _volumes(A.indptr, A.indices, parts, k, bool(pairs), get_threads())
    return PartitionMetrics(
        k=k,
        total_volume=int(send.sum()),
        send_volume=send,
        recv_volume=recv,
        nnz=np.bincount(parts, weights=np.diff(A.indptr), minlength=k).astype(np.int64),
        rows=np.bincount(parts, minlength=k),
        pair_volume=pair if pairs else None,
    )
