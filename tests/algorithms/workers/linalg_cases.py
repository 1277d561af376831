"""MPI worker: the operator's linear algebra (dot, norm, gram, qr, allreduce, fetch_rows,
allgather_rows, row_ids), 1-D vectors, spmm_t, normalize=, the gradient all-reduce and the
errors that name their fix, on every grid the rank count allows (c = 1, c = 2 when it
divides P, and 2D and 3D grids at P = 4).

Usage: mpiexec -n P python linalg_cases.py OUT.json
Every value is checked here against numpy/scipy/torch on the whole matrices (built alike on
every rank from seeds) and recorded as an error (max over ranks) or a flag; nothing is
asserted, so one failing rank cannot leave the others hanging. Rank 0 writes the JSON.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numba
import numpy as np
import scipy.sparse as sp
import torch
from mpi4py import MPI

import spmmgnn
from spmmgnn.data.normalize import gcn_norm, mean_norm
from spmmgnn.nn import allreduce_gradients, spmm, spmm_t

# the workers tests of several folders share (tests/workers/), imported as siblings
sys.path.insert(1, str(Path(__file__).resolve().parents[2] / "workers"))
from common import message  # noqa: E402

comm = MPI.COMM_WORLD
P = comm.size
out: dict = {"threads_before": numba.get_num_threads()}


def worst(value: float) -> float:
    return float(comm.allreduce(float(value), op=MPI.MAX))


def err(a, b) -> float:
    a = a.numpy() if torch.is_tensor(a) else np.asarray(a)
    b = b.numpy() if torch.is_tensor(b) else np.asarray(b)
    if a.shape != b.shape:
        return float("inf")
    return float(np.abs(a - b).max(initial=0.0))


def same_everywhere(value) -> bool:
    """Every rank holds the same bits."""
    arr = np.ascontiguousarray(value.numpy() if torch.is_tensor(value) else np.asarray(value))
    first = comm.bcast(arr, root=0)
    return bool(comm.allreduce(bool(np.array_equal(first, arr)), op=MPI.LAND))



def matrices(k: int):
    """(name, A, row layout, column layout), alike on every rank: a square non-symmetric A
    relabelled by a part vector, and a rectangular one with uneven blocks (an empty one)."""
    rng = np.random.default_rng(3 + k)
    n = 6 * k + 5
    A = sp.random(n, n, density=0.25, random_state=1, format="csr")
    A.data -= 0.3
    rows = rng.integers(1, 8, k)
    cols = rng.integers(1, 10, k)
    if k > 1:
        rows[k - 1] = 0  # an empty block of output rows
    B = sp.random(int(rows.sum()), int(cols.sum()), density=0.3, random_state=2, format="csr")
    return [("square_parts", A, rng.integers(0, k, n), None),
            ("rect_uneven", B, rows.tolist(), cols.tolist())]


def check_reductions(tag: str, op, A) -> None:
    m, n = A.shape
    rng = np.random.default_rng(11)
    for side, rows in (("input", n), ("output", m)):
        X, Y = rng.standard_normal((rows, 4)), rng.standard_normal((rows, 4))
        ids = op.row_ids(side)
        x, y = X[ids], Y[ids]
        out[f"{tag}:{side}:row_ids"] = worst(err(op.scatter_rows(X, side=side), x))
        out[f"{tag}:{side}:dot"] = worst(err(op.dot(x, y, side=side), (X * Y).sum(0)))
        out[f"{tag}:{side}:norm"] = worst(err(op.norm(x, side=side), np.linalg.norm(X, axis=0)))
        out[f"{tag}:{side}:gram"] = worst(err(op.gram(x, y, side=side), X.T @ Y))
        out[f"{tag}:{side}:gram_xx"] = worst(err(op.gram(x, side=side), X.T @ X))
        v = x[:, 0]
        d = op.dot(v, v, side=side)
        out[f"{tag}:{side}:dot_vector"] = worst(err(d, X[:, 0] @ X[:, 0]) + (np.ndim(d) != 0))
        xt = torch.from_numpy(x).float()
        nt = op.norm(xt, side=side)
        out[f"{tag}:{side}:norm_torch32"] = worst(
            err(nt.double(), np.linalg.norm(X, axis=0)) / 1e-5 * 1e-12
            + (0 if nt.dtype == torch.float32 else 1))
        out[f"{tag}:{side}:same_bits"] = same_everywhere(op.gram(x, y, side=side))
        # allreduce: each row once (at c = 2 too), numbers, arrays, tensors, max
        out[f"{tag}:{side}:allreduce_count"] = worst(abs(op.allreduce(len(ids)) - rows))
        out[f"{tag}:{side}:allreduce_array"] = worst(err(op.allreduce(x.sum(0)), X.sum(0)))
        out[f"{tag}:{side}:allreduce_max"] = worst(err(
            op.allreduce(torch.from_numpy(x.max(0, initial=-np.inf)), op="max"),
            torch.from_numpy(X.max(0))))
        # rows by id: another list on every rank, repeats, any order, an empty one
        mine = np.random.default_rng(100 + comm.rank)  # another list on every rank
        want = mine.integers(0, rows, 5 + comm.rank) if comm.rank != 1 else np.zeros(0, int)
        want = np.concatenate([want, want[:2]])
        got = op.fetch_rows(x, want, side=side)
        out[f"{tag}:{side}:fetch_rows"] = worst(err(got, X[want]))
        gv = op.fetch_rows(torch.from_numpy(v), torch.from_numpy(want), side=side)
        out[f"{tag}:{side}:fetch_rows_vector"] = worst(err(gv, X[want, 0]))
        out[f"{tag}:{side}:allgather_rows"] = worst(err(op.allgather_rows(x, side=side), X))
        full_v = op.allgather_rows(v, side=side)
        out[f"{tag}:{side}:allgather_vector"] = worst(err(full_v, X[:, 0]))


def check_qr(tag: str, op, A) -> None:
    n = A.shape[1]
    f = min(5, n)
    rng = np.random.default_rng(12)
    ids = op.row_ids("input")
    cases = {"well": rng.standard_normal((n, f))}
    U, _ = np.linalg.qr(rng.standard_normal((n, f)))
    V, _ = np.linalg.qr(rng.standard_normal((f, f)))
    cases["cond1e10"] = U @ np.diag(np.logspace(0, -10, f)) @ V.T  # TSQR's side
    for name, X in cases.items():
        q, r = op.qr(X[ids])
        orth = op.gram(q) - np.eye(f)
        _, r_np = np.linalg.qr(X)
        r_np *= np.where(np.diag(r_np) < 0, -1.0, 1.0)[:, None]
        out[f"{tag}:qr_{name}:orth"] = worst(np.abs(orth).max())
        out[f"{tag}:qr_{name}:qr_minus_x"] = worst(err(q @ r, X[ids]) / np.abs(X).max())
        out[f"{tag}:qr_{name}:r_rel"] = worst(err(r, r_np) / np.abs(r_np).max())
        out[f"{tag}:qr_{name}:r_same_bits"] = same_everywhere(r)
        out[f"{tag}:qr_{name}:triangular"] = worst(np.abs(np.tril(r, -1)).max())
    q32, r32 = op.qr(torch.from_numpy(cases["well"][ids]).float())
    out[f"{tag}:qr_torch32:orth"] = worst(
        np.abs(op.gram(q32.double()).numpy() - np.eye(f)).max() / 1e-5 * 1e-12
        + (0 if q32.dtype == torch.float32 and torch.is_tensor(r32) else 1))
    qv, rv = op.qr(cases["well"][ids, 0])
    out[f"{tag}:qr_vector"] = worst(err(qv * rv[0, 0], cases["well"][ids, 0])
                                    + (qv.ndim != 1) + abs(op.norm(qv) - 1))


def check_vectors_and_autograd(tag: str, op, A) -> None:
    m, n = A.shape
    rng = np.random.default_rng(13)
    X, Y = rng.standard_normal(n), rng.standard_normal(m)
    x = op.scatter_rows(X if comm.rank == 0 else None)
    y = op.scatter_rows(Y if comm.rank == 0 else None, side="output")
    z, t = op.matmul(x), op.matmul_t(y)
    Z, T = op.gather_rows(z), op.gather_rows(t, side="input")
    ok = x.ndim == y.ndim == z.ndim == t.ndim == 1
    if comm.rank == 0:
        ok = ok and Z.ndim == T.ndim == 1
        out[f"{tag}:vector_values"] = err(Z, A @ X) + err(T, A.T @ Y)
    out[f"{tag}:vector_shapes"] = bool(comm.allreduce(bool(ok), op=MPI.LAND))
    # spmm_t: values and gradient against torch autograd on the dense matrix
    Ad = torch.from_numpy(A.toarray())
    Yt = torch.from_numpy(rng.standard_normal((m, 3))).requires_grad_()
    W = torch.from_numpy(rng.standard_normal((n, 3)))
    ref = (W * (Ad.T @ Yt)).sum()
    ref.backward()
    yl = Yt.detach()[op.row_ids("output")].clone().requires_grad_()
    wt = spmm_t(op, yl)
    loss = (W[op.row_ids("input")] * wt).sum()
    loss.backward()
    out[f"{tag}:spmm_t_value"] = worst(err(wt.detach(), (Ad.T @ Yt.detach())[op.row_ids("input")]))
    out[f"{tag}:spmm_t_grad"] = worst(err(yl.grad, Yt.grad[op.row_ids("output")]))
    # both directions in one graph (LightGCN's shape): h = A (A^T y), gradient A A^T w
    Yt.grad = None
    (Ad @ (Ad.T @ Yt)).sum().backward()
    yl2 = Yt.detach()[op.row_ids("output")].clone().requires_grad_()
    spmm(op, spmm_t(op, yl2)).sum().backward()
    out[f"{tag}:spmm_spmm_t_grad"] = worst(err(yl2.grad, Yt.grad[op.row_ids("output")]))
    v = Yt.detach()[op.row_ids("output"), 0].clone().requires_grad_()
    spmm_t(op, v).sum().backward()
    out[f"{tag}:spmm_t_vector_grad"] = worst(
        err(v.grad, (Ad @ torch.ones(n, dtype=torch.float64))[op.row_ids("output")])
        + (v.grad.ndim != 1))


def check_errors(tag: str, grid, op, A) -> None:
    m, n = A.shape
    G = np.ones((m, 2))
    g = op.scatter_rows(G if grid.rank == 0 else None, side="output")
    tres = op.matmul_t(g)
    out[f"{tag}:err_gather_side"] = message(lambda: op.gather_rows(tres))
    out[f"{tag}:err_scatter_side"] = message(
        lambda: op.scatter_rows(G if grid.rank == 0 else None))
    xs = sp.random(op.n_local_in, 3, density=0.5, format="csr")
    out[f"{tag}:err_sparse_x"] = message(lambda: op.matmul(xs))
    bf = torch.ones((op.n_local_in, 3), dtype=torch.bfloat16)
    out[f"{tag}:err_bfloat16"] = message(lambda: op.matmul(bf))
    out[f"{tag}:err_bfloat16_dot"] = message(lambda: op.dot(bf, bf))
    bad = [n + 3] if grid.rank == P - 1 else [0]
    out[f"{tag}:err_fetch_ids"] = message(lambda: op.fetch_rows(np.ones((op.n_local_in, 2)),
                                                                bad))
    out[f"{tag}:err_allreduce_shape"] = message(lambda: op.allreduce(np.ones(1 + grid.rank % 2)))


def check_normalize(tag: str, grid) -> None:
    rng = np.random.default_rng(14)
    n = 5 * grid.n_block_rows + 4
    A = sp.random(n, n, density=0.2, random_state=4, format="csr")  # directed, weighted
    X = rng.standard_normal((n, 3))
    algo = "sparse15d" if grid.replication > 1 else "sparse1d"
    for kind, ref in (("gcn", gcn_norm), ("mean", mean_norm)):
        op = spmmgnn.DistSpMM.from_scipy(A if grid.rank == 0 else None, grid, algorithm=algo,
                                         normalize=kind)
        Z = op.gather_rows(op.matmul(op.scatter_rows(X if grid.rank == 0 else None)))
        if grid.rank == 0:
            out[f"{tag}:normalize_{kind}"] = err(Z, ref(A) @ X)
    R = sp.random(n, n + 2, density=0.2, random_state=5, format="csr")
    out[f"{tag}:err_gcn_rect"] = message(lambda: spmmgnn.DistSpMM.from_scipy(
        R if grid.rank == 0 else None, grid, algorithm=algo, normalize="gcn"))
    op = spmmgnn.DistSpMM.from_scipy(R if grid.rank == 0 else None, grid, algorithm=algo,
                                     normalize="mean")
    Z = op.gather_rows(op.matmul(op.scatter_rows(np.ones((n + 2, 1)) if grid.rank == 0
                                                 else None)))
    if grid.rank == 0:
        nonempty = np.asarray(R.sum(1)).reshape(-1, 1) > 0
        out[f"{tag}:normalize_mean_rect"] = err(Z, nonempty * 1.0)


def check_gradients(tag: str, grid, algo: str) -> None:
    """A replicated linear layer on A X: the summed gradient equals one process's."""
    rng = np.random.default_rng(15)
    n = 6 * grid.n_block_rows + 1
    A = sp.random(n, n, density=0.3, random_state=6, format="csr")
    X, T = rng.standard_normal((n, 4)), rng.standard_normal((n, 2))
    op = spmmgnn.DistSpMM.from_scipy(A if grid.rank == 0 else None, grid, algorithm=algo)
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 2).double()
    ids = op.row_ids()
    pred = lin(spmm(op, torch.from_numpy(X[ids])))
    ((pred - torch.from_numpy(T[ids])) ** 2).sum().backward()
    allreduce_gradients(lin.parameters(), op)
    torch.manual_seed(0)
    ref = torch.nn.Linear(4, 2).double()
    ((ref(torch.from_numpy(A @ X)) - torch.from_numpy(T)) ** 2).sum().backward()
    out[f"{tag}:grad_weight"] = worst(err(lin.weight.grad, ref.weight.grad))
    out[f"{tag}:grad_bias"] = worst(err(lin.bias.grad, ref.bias.grad))


def grids() -> list[tuple[str, spmmgnn.ProcessGrid, str]]:
    """(tag, grid, algorithm): 1D (P = 1 and 3 run it), 1.5D with c = 2, and at P = 4 a 2D
    and a 3D grid (every rank its own rows: the reductions run over all ranks there)."""
    out = [] if P == 4 else [("c1", spmmgnn.ProcessGrid(comm), "sparse1d")]
    if P % 2 == 0:
        out.append(("c2", spmmgnn.ProcessGrid(comm, replication=2), "sparse15d"))
    if P == 4:
        out += [("2d", spmmgnn.ProcessGrid(comm, shape=(2, 2)), "sparse2d"),
                ("3d", spmmgnn.ProcessGrid(comm, shape=(2, 1, 2)), "sparse3d")]
    return out


def main() -> None:
    for g, grid, algo in grids():
        for name, A, rows, cols in matrices(grid.n_block_rows):
            op = spmmgnn.DistSpMM.from_scipy(A if comm.rank == 0 else None, grid,
                                             algorithm=algo, partition=rows,
                                             col_partition=cols)
            tag = f"{g}:{name}"
            check_reductions(tag, op, A)
            check_qr(tag, op, A)
            check_vectors_and_autograd(tag, op, A)
            if name == "rect_uneven" and g in ("c1", "c2"):
                check_errors(tag, grid, op, A)
        if g in ("c1", "c2"):
            check_normalize(g, grid)
        check_gradients(g, grid, algo)
    out["threads_after"] = spmmgnn.get_threads()
    if comm.rank == 0:
        with open(sys.argv[1], "w") as fh:
            json.dump(out, fh)


if __name__ == "__main__":
    main()
