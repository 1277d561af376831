"""Expected values from the definitions, for tests, sharing no code with the library: the
communication metrics of docs/metrics.md counted literally (one Python loop per column, sets
of parts) and the rounding step of the intB codecs (docs/codecs.md)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def brute_metrics(A, parts, k: int):
    """(total, send per part, receive per part, non-zeros per part): column c is sent by the
    part of vertex c to every other part holding a row with a non-zero in column c."""
    A = sp.csc_array(A)
    n = A.shape[0]
    send = np.zeros(k, dtype=np.int64)
    recv = np.zeros(k, dtype=np.int64)
    for c in range(n):
        rows = A.indices[A.indptr[c]:A.indptr[c + 1]]
        net = {int(parts[c])} | {int(parts[r]) for r in rows}
        send[parts[c]] += len(net) - 1
        for p in net - {int(parts[c])}:
            recv[p] += 1
    nnz = np.zeros(k, dtype=np.int64)
    R = sp.csr_array(A)
    for r in range(n):
        nnz[parts[r]] += R.indptr[r + 1] - R.indptr[r]
    return int(send.sum()), send, recv, nnz


# largest quantized level of each codec, 2^bits - 1, written out
QMAX = {"int8": 255, "int4": 15, "int2": 3}


def step_bound(rows: np.ndarray, qmax: int) -> np.ndarray:
    """Largest rounding step of each row's quantization: its range, widened by the outward
    rounding of both ends to bfloat16 (< 2^-7 relative each), over qmax."""
    rows = np.asarray(rows, dtype=np.float64)
    lo, hi = rows.min(axis=1), rows.max(axis=1)
    return ((hi - lo) + 2.0 ** -7 * (np.abs(lo) + np.abs(hi))) / qmax
