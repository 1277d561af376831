"""MPI worker: the row algebra's agreement (issue 46's hangs and silent mixes): ranks that
pass different but legal arguments to dot / norm / gram / allreduce make the same collective
calls and get one SpmmgnnError on every rank, or the right numbers; float32 sums accumulate
in float64; norm scales huge and tiny columns.

Usage: mpiexec -n P python linalg_agreement.py OUT.json
Each case records, per rank, whether it raised (and whether collectively) or its value
error against numpy on the whole matrix; nothing is asserted here. A case that left the
ranks in different collectives hangs the next one (the test's timeout catches it).
"""

from __future__ import annotations

import json
import sys

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

import spmmgnn
from spmmgnn import SpmmgnnError

comm = MPI.COMM_WORLD
me, P = comm.rank, comm.size
n = 1000 + 7 * P  # P does not divide n on every run
A = sp.random(n, n, density=0.01, format="csr", random_state=1) + sp.eye(n)
op = spmmgnn.DistSpMM.from_scipy(A, algorithm="sparse1d")
rows = op.row_ids("input")
X = np.random.default_rng(2).standard_normal((n, 3))
x = X[rows]
out: dict = {}


def case(name: str, fn, reference=None) -> None:
    try:
        value = fn()
        got = {"raised": False}
        if reference is not None:
            ref = np.asarray(reference, dtype=np.float64)
            got["error"] = float(np.max(np.abs(np.asarray(value, dtype=np.float64) - ref))
                                 / np.max(np.abs(ref)))
    except SpmmgnnError as exc:
        got = {"raised": True, "collective": exc.collective, "message": str(exc)}
    comm.Barrier()  # a rank left in another collective hangs here
    out[name] = comm.gather(got)


case("dot_x_or_copy", lambda: op.dot(x, x if me == 0 else x.copy()), (X * X).sum(0))
case("gram_x_or_copy", lambda: op.gram(x) if me == 0 else op.gram(x, x.copy()), X.T @ X)
case("norm_bad_side_one_rank",
     lambda: op.norm(x, side="garbage" if me == 0 else "input"))
case("dot_after_errors", lambda: op.dot(x[:, 0], x[:, 0]), (X[:, 0] ** 2).sum())
case("norm_sides_differ", lambda: op.norm(x, side="input" if me == 0 else "output"))
case("dot_sides_differ", lambda: op.dot(x, x, side="output" if me == 0 else "input"))
case("calls_differ", lambda: op.dot(x, x) if me == 0 else op.norm(x))
case("widths_differ", lambda: op.norm(x if me == 0 else x[:, :2]))
# NaN/Inf on one rank's rows (dot and norm read them from their own sums, issue 46), and
# finite rows whose products overflow (no error: the sum is inf)
bad = x.copy()
if me == P - 1:
    bad[-1, 1] = np.nan
case("dot_nan_one_rank", lambda: op.dot(bad, bad))
case("norm_nan_one_rank", lambda: op.norm(bad[:, 1]))
zero_row, inf_y = x.copy(), x.copy()
if me == 0:
    zero_row[0], inf_y[0, 2] = 0.0, np.inf  # inf * 0: NaN in the sum, never a finite one
case("dot_inf_in_y_only", lambda: op.dot(zero_row, inf_y))
case("norm_inf_one_rank", lambda: op.norm(inf_y if me == 0 else x))
case("dot_overflow", lambda: float(np.all(np.isinf(op.dot(x * 1e200, x * 1e200)))), 1.0)
case("allreduce_shapes", lambda: op.allreduce(np.ones((2, 3) if me == 0 else (3, 2))))
case("allreduce_ops", lambda: op.allreduce(np.ones(3), op="sum" if me == 0 else "max"))
case("allreduce_same", lambda: op.allreduce(np.ones((2, 3))), np.full((2, 3), P))

# float32 accumulates in float64: a long float32 column against the float64 reference
big_n = 200_000
big = spmmgnn.DistSpMM.from_scipy(sp.eye(big_n, format="csr"), algorithm="sparse1d")
V = (np.random.default_rng(3).random((big_n, 2)) + 0.5).astype(np.float32)
v = V[big.row_ids("input")]
V64 = V.astype(np.float64)
case("dot_float32", lambda: big.dot(v, v), (V64 * V64).sum(0))
case("norm_float32", lambda: big.norm(v), np.sqrt((V64 * V64).sum(0)))
case("gram_float32", lambda: big.gram(v), V64.T @ V64)
case("norm_huge", lambda: op.norm(x * 1e200) / 1e200, np.linalg.norm(X, axis=0))
case("norm_tiny", lambda: op.norm(x * 1e-200) * 1e200, np.linalg.norm(X, axis=0))
case("norm_huge_vector", lambda: op.norm(x[:, 0] * 1e300) / 1e300, np.linalg.norm(X[:, 0]))
# vectors: a contiguous numpy vector takes dot/norm's short path, a strided one (or zeros,
# NaN, huge values) the general one; ranks on different paths make the same collectives
col = x[:, 0]  # a strided view: the general path
contiguous = col.copy()
mine = contiguous if me == 0 else col
case("dot_vector_paths_mixed", lambda: op.dot(mine, mine), (X[:, 0] ** 2).sum())
case("norm_vector_paths_mixed", lambda: op.norm(mine), np.linalg.norm(X[:, 0]))
case("dot_vector_short_path", lambda: op.dot(contiguous, contiguous), (X[:, 0] ** 2).sum())
case("norm_vector_short_path", lambda: op.norm(contiguous), np.linalg.norm(X[:, 0]))
case("calls_differ_vectors",
     lambda: op.dot(contiguous, contiguous) if me == 0 else op.norm(contiguous))
first_rows = comm.bcast(op.row_ids("input") if me == 0 else None, root=0)
zeroed = X[:, 0].copy()
zeroed[first_rows] = 0.0
zeros_here = np.zeros_like(contiguous) if me == 0 else contiguous
case("norm_vector_zero_one_rank", lambda: op.norm(zeros_here), np.linalg.norm(zeroed))
huge_here = contiguous * 1e300 if me == 0 else contiguous * 1e-300
case("norm_vector_scaled_one_rank", lambda: op.norm(huge_here) / 1e300,
     np.linalg.norm(X[first_rows, 0]))
nan_here = np.full_like(contiguous, np.nan) if me == 0 else contiguous
case("dot_vector_nan_one_rank", lambda: op.dot(nan_here, nan_here))
vc = np.ascontiguousarray(v[:, 0])
case("dot_float32_vector_short_path", lambda: big.dot(vc, vc), (V64[:, 0] ** 2).sum())
case("norm_float32_vector_short_path", lambda: big.norm(vc), np.sqrt((V64[:, 0] ** 2).sum()))
out["vector_dtypes"] = [str(big.dot(vc, vc).dtype), str(big.norm(vc).dtype),
                        str(type(op.dot(contiguous, contiguous)).__name__)]
case("dtype_out", lambda: [str(big.dot(v[:, 0], v[:, 0]).dtype),
                           str(big.norm(v).dtype), str(big.gram(v).dtype)])
out["dtype_out_values"] = [str(big.dot(v[:, 0], v[:, 0]).dtype), str(big.norm(v).dtype),
                           str(big.gram(v).dtype)]
if me == 0:
    with open(sys.argv[1], "w") as fh:
        json.dump(out, fh)
