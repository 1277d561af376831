"""MPI worker: the operator's row algebra (dot, norm, gram, qr, allreduce, fetch_rows,
allgather_rows), the delayed views (cd-r, 0c) and ``spmmgnn.krylov`` on a torch-cpu grid,
over MPI (rows staged through host memory and counted) and over Gloo (``transport="torch"``),
against the same calls on the host grid, and the ``device_host`` bytes each call counted
against what it staged.

Usage: mpiexec -n P python linalg_device.py OUT.json
P = 2: a 1D grid (sparse1d: the row algebra, the delayed views, cg and subspace iteration);
P = 4: a 1.5D grid with c = 2 (sparse15d: the row algebra). Two operators: a square A
relabelled by a part vector, and a rectangular one with uneven blocks, one of them empty
(both sides). Nothing is asserted here; rank 0 writes, per case, the worst difference to
the host result over the ranks, whether every rank matched it bit for bit, and whether every
rank counted exactly the bytes it staged (``<case>:bytes`` is the list of mismatches).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch
from mpi4py import MPI
from scipy.sparse.linalg import eigsh, spsolve

import spmmgnn
from spmmgnn import krylov
from spmmgnn.algorithms.delayed import DelayedRemote

# the workers tests of several folders share (tests/workers/), imported as siblings
sys.path.insert(1, str(Path(__file__).resolve().parents[2] / "workers"))
from common import message  # noqa: E402
from krylov_cases import matrices as spd_matrices  # noqa: E402

comm = MPI.COMM_WORLD
P = comm.size
out: dict = {}
F = 4


def host(v) -> np.ndarray:
    return v.numpy() if torch.is_tensor(v) else np.asarray(v)


def every(flag: bool) -> bool:
    return bool(comm.allreduce(bool(flag), op=MPI.LAND))


def worst(value: float) -> float:
    return float(comm.allreduce(float(value), op=MPI.MAX))


def same_everywhere(v) -> bool:
    arr = np.ascontiguousarray(host(v))
    first = comm.bcast(arr, root=0)
    return every(np.array_equal(first, arr))


class Case:
    """One call on the host operator and on the device operator: the difference, bit
    equality, the result's kind, and the device_host bytes against the expected."""

    def __init__(self, tag: str, ref, dev):
        self.tag, self.ref, self.dev = tag, ref, dev

    def run(self, name: str, call, x, want: tuple[int, int], agreed: bool = True,
            convert: bool = True) -> None:
        """``call(op, x)`` on both operators (a tensor of ``x`` on the device one unless
        ``convert`` is False); ``want``: the (device to host, host to device) bytes it
        stages; ``agreed``: a result every rank holds alike."""
        ref, dev, stats = self.ref, self.dev, self.dev.stats
        a = call(ref, x)
        before = (stats.bytes_device_to_host, stats.bytes_host_to_device)
        b = call(dev, torch.from_numpy(x) if convert else x)
        got = (stats.bytes_device_to_host - before[0], stats.bytes_host_to_device - before[1])
        key = f"{self.tag}:{name}"
        a, b = (a, b) if isinstance(a, tuple) else ((a,), (b,))
        kinds = all(_same_kind(s, t, convert) for s, t in zip(a, b, strict=True))
        diff = max(float(np.abs(host(s) - host(t)).max(initial=0.0))
                   / max(1.0, float(np.abs(host(s)).max(initial=0.0)))
                   for s, t in zip(a, b, strict=True))
        exact = all(np.array_equal(host(s), host(t)) for s, t in zip(a, b, strict=True))
        out[f"{key}:err"] = worst(diff if kinds else np.inf)
        out[f"{key}:exact"] = every(exact and kinds)
        bad = comm.gather(None if tuple(got) == tuple(want) else [comm.rank, got, want])
        out[f"{key}:bytes"] = [b for b in bad if b] if comm.rank == 0 else None
        if agreed:
            out[f"{key}:same_bits"] = same_everywhere(b[-1])


def _same_kind(a, b, tensor: bool) -> bool:
    """``b`` (the device grid's result) is a tensor (or, for a number in, the same Python
    type) with ``a``'s shape and dtype."""
    if not tensor:
        return type(a) is type(b) and np.shape(a) == np.shape(b)
    return (torch.is_tensor(b) and np.shape(host(a)) == tuple(b.shape)
            and host(a).dtype == host(b).dtype)


def fetch_bytes(op, side: str, want_ids: np.ndarray, f: int, itemsize: int,
                staged: bool) -> tuple[int, int]:
    """(rows asked of me, distinct rows I asked) x row bytes: what fetch_rows stages."""
    if not staged:
        return 0, 0
    asks = op.grid.across_block_rows.allgather(want_ids)
    mine = set(op.row_ids(side).tolist())
    asked_of_me = sum(len(set(np.unique(w).tolist()) & mine) for w in asks)
    row = f * itemsize
    return asked_of_me * row, np.unique(want_ids).size * row


def row_algebra(case: Case, op, side: str, rows: int, staged: bool) -> None:
    """Every call of the row algebra at float64 and float32, 2-D and 1-D, on ``side``."""
    rng = np.random.default_rng(11)
    ids = op.row_ids(side)
    X, Y = rng.standard_normal((rows, F)), rng.standard_normal((rows, F))
    n_local = ids.size
    for dt in (np.float64, np.float32):
        s = np.dtype(dt).itemsize
        x = X[ids].astype(dt)
        y = np.ascontiguousarray(Y[ids, :3].astype(dt))
        d = dt.__name__
        scan = F if n_local == 0 else 0  # an empty block's 0 squares: is a column non-zero?
        case.run(f"{side}:{d}:dot", lambda o, v, y=y: o.dot(v[:, :3], _like(v, y), side=side),
                 x, (8 * 3, s * 3))
        case.run(f"{side}:{d}:dot_vector", lambda o, v: o.dot(v[:, 0], v[:, 0], side=side),
                 x, (8, s))
        case.run(f"{side}:{d}:norm", lambda o, v: o.norm(v, side=side), x,
                 (8 * F + scan, s * F))
        case.run(f"{side}:{d}:gram", lambda o, v, y=y: o.gram(v, _like(v, y), side=side),
                 x, (8 * F * 3, s * F * 3))
        case.run(f"{side}:{d}:gram_xx", lambda o, v: o.gram(v, side=side), x,
                 (8 * F * F, s * F * F))
        if side == "input":  # (a QR needs n >= f rows: the input side has them)
            case.run(f"{d}:qr", lambda o, v: o.qr(v), x, (16 * F * F, 16 * F * F + s * F * F))
        want = np.random.default_rng(100 + comm.rank).integers(0, rows, 4 + comm.rank)
        want = np.concatenate([want, want[:2]])  # repeats
        case.run(f"{side}:{d}:fetch_rows", lambda o, v, w=want: o.fetch_rows(v, w, side=side),
                 x, fetch_bytes(op, side, want, F, s, staged), agreed=False)
        case.run(f"{side}:{d}:fetch_rows_vector",
                 lambda o, v, w=want: o.fetch_rows(v[:, 1], w, side=side),
                 x, fetch_bytes(op, side, want, 1, s, staged), agreed=False)
        every_row = (n_local * F * s, rows * F * s) if staged else (0, 0)
        case.run(f"{side}:{d}:allgather_rows", lambda o, v: o.allgather_rows(v, side=side),
                 x, every_row)
    sums = X[ids].sum(0)  # (the same bits in on both grids)
    case.run(f"{side}:allreduce_tensor", lambda o, v: o.allreduce(v), sums, (8 * F, 8 * F))
    case.run(f"{side}:allreduce_max", lambda o, v: o.allreduce(v, op="max"), sums[:2],
             (16, 16))
    case.run(f"{side}:allreduce_bool", lambda o, v: o.allreduce(v), sums > 0, (F, 8 * F))
    # numbers and numpy arrays on the device grid: the caller's kind back, nothing staged
    case.run(f"{side}:allreduce_int", lambda o, v: o.allreduce(v), n_local, (0, 0),
             convert=False)
    case.run(f"{side}:allreduce_numpy", lambda o, v: o.allreduce(v), sums, (0, 0),
             convert=False)
    big = X[ids] * 1e200  # squares overflow: the scaled norm (one more all-reduce)
    case.run(f"{side}:norm_scaled", lambda o, v: o.norm(v, side=side), big,
             (8 * F + F + 8 * F + 8 * F, 8 * F + 8 * F))


def _like(v, y):
    return torch.from_numpy(y) if torch.is_tensor(v) else y


def qr_cases(case: Case, op, n: int) -> None:
    """CholQR2 on a 1-D vector, TSQR on an ill-conditioned block (condition number 1e10)."""
    rng = np.random.default_rng(12)
    ids = op.row_ids("input")
    U, _ = np.linalg.qr(rng.standard_normal((n, F)))
    V, _ = np.linalg.qr(rng.standard_normal((F, F)))
    C = U @ np.diag(np.logspace(0, -10, F)) @ V.T
    k = min(ids.size, F)  # the local R's rows
    # (Q itself is as accurate as the condition number allows: compare Q R and R)
    case.run("qr_tsqr", lambda o, v: _r_and_product(*o.qr(v)), C[ids],
             (8 * F * F + 8 * k * F, 8 * k * F + 8 * F * F))
    case.run("qr_vector", lambda o, v: o.qr(v[:, 0]), rng.standard_normal((n, 1))[ids],
             (16, 16 + 8))


def _r_and_product(q, r):
    return q @ r, r


def operators(grid_ref, grid_dev, algo: str):
    """(name, A, host operator, device operator, rows of each side) for the two matrices."""
    k = grid_ref.n_block_rows
    rng = np.random.default_rng(3 + k)
    n = 6 * k + 5
    A = sp.random(n, n, density=0.25, random_state=1, format="csr")
    rows, cols = rng.integers(1, 8, k), rng.integers(4, 10, k)
    rows[k - 1] = 0  # an empty block of output rows
    B = sp.random(int(rows.sum()), int(cols.sum()), density=0.3, random_state=2, format="csr")
    for name, M, layout, col_layout in (("square", A, rng.integers(0, k, n), None),
                                        ("rect", B, rows.tolist(), cols.tolist())):
        ops = [spmmgnn.DistSpMM.from_scipy(M if comm.rank == 0 else None, g, algorithm=algo,
                                           partition=layout, col_partition=col_layout)
               for g in (grid_ref, grid_dev)]
        yield name, M, ops[0], ops[1]


def linalg_on(tag: str, grid_ref, grid_dev, algo: str) -> None:
    staged = grid_dev.transport.name == "mpi"
    for name, M, ref, dev in operators(grid_ref, grid_dev, algo):
        case = Case(f"{tag}:{name}", ref, dev)
        for side, rows in (("input", M.shape[1]), ("output", M.shape[0])):
            row_algebra(case, dev, side, rows, staged)
        qr_cases(case, dev, M.shape[1])
    msgs = message(lambda: dev.dot(np.ones((dev.n_local_in, 2)), np.ones((dev.n_local_in, 2))))
    if comm.rank == 0:
        out[f"{tag}:err_numpy_on_device"] = msgs


def delayed_on(tag: str, grid_ref, grid_dev) -> None:
    """cd-r (local and delayed backward), r = 3 and 0c: each call against the host grid's
    views (products to 1e-12, bytes sent equal), and the device_host bytes of the whole
    run equal to the bytes the halo plans exchanged over MPI (every row staged once each
    way), 0 over Gloo."""
    staged = grid_dev.transport.name == "mpi"
    n = 40
    A = sp.random(n, n, density=0.3, random_state=7, format="csr")
    sizes = [15, 25]
    modes = (("stale2", 2, False, "local"), ("stale2_delayed", 2, False, "delayed"),
             ("stale3", 3, False, "local"), ("drop", 0, True, "local"), ("exact", 0, False,
                                                                          "local"))
    for mode, r, drop, backward in modes:
        ops = [spmmgnn.DistSpMM.from_scipy(A if comm.rank == 0 else None, g,
                                           algorithm="sparse1d", partition=sizes)
               for g in (grid_ref, grid_dev)]
        views = [DelayedRemote(o, r, drop, backward, seed=3) for o in ops]
        layer = [v.views(2)[1] for v in views]
        stats = ops[1].stats
        start = (stats.bytes_sent, stats.bytes_received, stats.bytes_device_to_host,
                 stats.bytes_host_to_device)
        diff, sent_same, kinds = 0.0, True, True
        for t in range(6):
            X = np.random.default_rng(100 + t).standard_normal((n, 3))[ops[0].row_ids("input")]
            Y = np.random.default_rng(200 + t).standard_normal((n, 3))[ops[0].row_ids()]
            for call, v in (("matmul", X), ("matmul_t", Y)):
                sent = [o.stats.bytes_sent for o in ops]
                a = getattr(layer[0], call)(v)
                b = getattr(layer[1], call)(torch.from_numpy(v))
                kinds = kinds and torch.is_tensor(b) and b.shape == a.shape
                diff = max(diff, float(np.abs(a - host(b)).max(initial=0.0)))
                sent_same = sent_same and (ops[0].stats.bytes_sent - sent[0]
                                           == ops[1].stats.bytes_sent - sent[1])
        for v in views:
            v.close()
        moved = (stats.bytes_sent - start[0], stats.bytes_received - start[1])
        staged_bytes = (stats.bytes_device_to_host - start[2],
                        stats.bytes_host_to_device - start[3])
        want = moved if staged else (0, 0)
        out[f"{tag}:{mode}:err"] = worst(diff if kinds else np.inf)
        out[f"{tag}:{mode}:sent_same"] = every(sent_same)
        out[f"{tag}:{mode}:bytes"] = every(staged_bytes == want)
        out[f"{tag}:{mode}:moved"] = every(moved[0] > 0 if mode != "drop" else moved[0] == 0)


def krylov_on(tag: str, grid_dev) -> None:
    """cg and subspace iteration on the device grid against scipy; the results are tensors
    on the grid's device; numpy input there is one error on every rank."""
    sizes = [40, 47]
    n = sum(sizes)
    M, N = spd_matrices(n)
    op = spmmgnn.DistSpMM.from_scipy(M if comm.rank == 0 else None, grid_dev,
                                     algorithm="sparse1d", partition=sizes)
    ids = op.row_ids("input")
    B = np.random.default_rng(5).standard_normal((n, 2))
    ref = spsolve(sp.csc_array(M), B)
    x, info = krylov.cg(op, torch.from_numpy(B[ids, 0]), tol=1e-10)
    out[f"{tag}:cg_vector"] = worst(np.abs(host(x) - ref[ids, 0]).max() / np.abs(ref).max())
    out[f"{tag}:cg_kind"] = every(torch.is_tensor(x) and x.shape == (ids.size,)
                                  and x.dtype == torch.float64 and info.converged)
    X, info = krylov.cg(op, torch.from_numpy(B[ids]).float(), x0=torch.ones(ids.size, 2),
                        tol=1e-6)
    out[f"{tag}:cg_block32"] = worst(np.abs(host(X) - ref[ids]).max() / np.abs(ref).max())
    out[f"{tag}:cg_block32_kind"] = every(X.dtype == torch.float32 and info.converged)
    eop = spmmgnn.DistSpMM.from_scipy(N if comm.rank == 0 else None, grid_dev,
                                      algorithm="sparse1d", partition=sizes)
    theta, Q, einfo = krylov.subspace_iteration(eop, 4, tol=1e-9, maxiter=2000)
    lam, U = eigsh(N, k=4, which="LM")
    lam = lam[np.argsort(-np.abs(lam))]
    out[f"{tag}:eig_values"] = worst(np.abs(theta - lam).max())
    V = host(eop.allgather_rows(Q))
    out[f"{tag}:eig_subspace"] = worst(np.abs(np.linalg.svd(U.T @ V, compute_uv=False)
                                              - 1).max())
    out[f"{tag}:eig_kind"] = every(torch.is_tensor(Q) and einfo.converged)
    msgs = message(lambda: krylov.cg(op, B[ids, 0]))
    if comm.rank == 0:
        out[f"{tag}:err_cg_numpy"] = msgs


def main() -> None:
    c = 2 if P == 4 else 1
    algo = "sparse15d" if c == 2 else "sparse1d"
    grid_ref = spmmgnn.ProcessGrid(comm, replication=c)
    for transport in ("mpi", "torch"):
        grid_dev = spmmgnn.ProcessGrid(comm, replication=c, device="cpu", transport=transport)
        tag = f"c{c}:{transport}"
        linalg_on(tag, grid_ref, grid_dev, algo)
        if P == 2:
            delayed_on(f"{tag}:delayed", grid_ref, grid_dev)
            krylov_on(f"{tag}:krylov", grid_dev)
    if comm.rank == 0:
        with open(sys.argv[1], "w") as fh:
            json.dump(out, fh)


if __name__ == "__main__":
    main()
