"""MPI worker (2 or 3 ranks): the per-call path of issue 46 (persistent exchanges and
probe all-reduce, byte counts made once per buffer pair) against scipy.

Usage: python percall_cases.py OUT.json

A non-symmetric 23 x 23 matrix on uneven blocks (P = 3: an empty middle block, P never
divides 23), ``sparse1d`` with and without validation. A sequence of calls that changes
width, dtype and direction (each a new persistent request), then repeats earlier ones: every
result against scipy, every result still the caller's own after the later calls, and the
byte counters equal to the rows each call moves times its row bytes. Then, with the
persistent requests alive, a bad input on one rank (NaN, another width, wrong rows, another
method) is one collective error on every rank and the next call is right; an exchange
started and never finished (an exception between post and finish) does not stop the next
call. Rank 0 writes the JSON; the test also reads the job's stderr (no request left to MPI
to free at exit).
"""

from __future__ import annotations

import gc
import json
import sys
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from spmmgnn import DistSpMM, ProcessGrid, SpmmgnnError

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
N = 23
A = sp.random(N, N, density=0.2, random_state=5, format="csr")  # A != A.T
SIZES = {2: [15, 8], 3: [12, 0, 11]}[size]
rng = np.random.default_rng(7)
X = {f: rng.standard_normal((N, f)) for f in (1, 2, 3)}
SEQUENCE = [("matmul", 1, np.float64), ("matmul", 3, np.float64), ("matmul", 2, np.float32),
            ("matmul_t", 1, np.float64), ("matmul", 0, np.float64),  # 0: a 1-D vector
            ("matmul", 1, np.float64), ("matmul_t", 3, np.float32), ("matmul", 3, np.float64)]


def caught(fn) -> str | None:
    try:
        fn()
    except SpmmgnnError as exc:
        return f"collective={exc.collective} {exc}"
    return None


def rows_of(op, what: str, f: int, dtype) -> tuple[np.ndarray, np.ndarray]:
    """(this rank's input rows, the expected output rows) of a call, from the full matrices."""
    full = X[max(f, 1)]
    if what == "matmul":
        x, want = full[op.row_ids("input")], (A @ full)[op.row_ids("output")]
    else:
        x, want = full[op.row_ids("output")], (A.T @ full)[op.row_ids("input")]
    x = x.astype(dtype)
    return (x[:, 0].copy(), want[:, 0]) if f == 0 else (np.ascontiguousarray(x), want)


def run_sequence(op) -> dict:
    plan = op.product.plan
    kept, worst, sent, received = [], 0.0, 0, 0
    for what, f, dtype in SEQUENCE + SEQUENCE:  # twice: the second round reuses requests
        x, want = rows_of(op, what, f, dtype)
        got = getattr(op, what)(x)
        tol = 1e-5 if dtype == np.float32 else 1e-12
        worst = max(worst, float(np.abs(got - want).max(initial=0.0)) * (1e-12 / tol))
        kept.append((got, got.copy()))
        row_bytes = max(f, 1) * np.dtype(dtype).itemsize
        s, r = plan.rows[what == "matmul"][:2]
        sent, received = sent + s * row_bytes, received + r * row_bytes
    stats = op.comm_stats()
    return dict(error=worst,
                kept=all(np.array_equal(a, b) and a.dtype == b.dtype for a, b in kept),
                distinct=len({id(a) for a, _ in kept}) == len(kept),
                bytes_ok=(stats["bytes_sent"], stats["bytes_received"]) == (sent, received),
                exchanges_ok=stats["exchanges"] == len(kept),
                bytes=[stats["bytes_sent"], sent, stats["bytes_received"], received])


def bad_inputs(op) -> dict:
    """Bad input on one rank after the persistent requests exist; a right call after each."""
    x, want = rows_of(op, "matmul", 1, np.float64)
    y, _ = rows_of(op, "matmul_t", 1, np.float64)
    last = size - 1
    nan = x.copy()
    if nan.size:
        nan[0, 0] = np.nan
    cases = dict(
        nan_on_last_rank=lambda: op.matmul(nan if rank == last or not x.size else x),
        width_differs=lambda: op.matmul(np.hstack([x, x]) if rank == 0 else x),
        rows_wrong=lambda: op.matmul(x[:-1] if rank == 0 else x),
        matmul_vs_matmul_t=lambda: op.matmul(x) if rank == 0 else op.matmul_t(y),
    )
    out = {}
    for name, fn in cases.items():
        msg = caught(fn)
        after = float(np.abs(op.matmul(x) - want).max(initial=0.0))
        out[name] = dict(messages=comm.gather(msg, root=0), after=after)
    return out


def abandoned(op) -> float:
    """An exchange of the pooled buffers started and dropped unfinished, then a call."""
    x, want = rows_of(op, "matmul", 1, np.float64)
    plan = op.product.plan
    plan.start_bcast(x, plan.buffer("ghost", plan.n_ghost, 1, np.float64))
    got = op.matmul(x)
    return float(np.abs(got - want).max(initial=0.0))


result = {}
for validate in (True, False):
    op = DistSpMM.from_scipy(A if rank == 0 else None, ProcessGrid(comm), partition=SIZES,
                             validate=validate)
    got = dict(sequence=run_sequence(op), abandoned=abandoned(op))
    if validate:
        got["bad"] = bad_inputs(op)
    result[str(validate)] = comm.gather(got, root=0)
    del op
    gc.collect()  # its requests are freed with it (the next operator makes its own)
kept_op = DistSpMM.from_scipy(A if rank == 0 else None, ProcessGrid(comm), partition=SIZES)
kept_op.matmul(rows_of(kept_op, "matmul", 2, np.float64)[0])  # alive at exit: freed then
if rank == 0:
    Path(sys.argv[1]).write_text(json.dumps(result))
