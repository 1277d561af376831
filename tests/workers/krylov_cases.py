"""MPI worker: ``spmmgnn.krylov`` (cg, subspace_iteration, as_linear_operator) on every grid
P allows (1D; P = 4: 1.5D c = 2, 2D 2x2, 3D 2x1x2), uneven blocks with an empty one, against
scipy.sparse.linalg on the whole matrix.

Usage: mpiexec -n P python krylov_cases.py OUT.json
Nothing is asserted here (one failing rank must not leave the others hanging); rank 0 writes
errors (max over ranks), flags and the messages of refused calls.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI
from scipy.sparse.linalg import eigsh, spsolve

import spmmgnn
from spmmgnn import SpmmgnnError, krylov

comm = MPI.COMM_WORLD
P = comm.size
out: dict = {}


def worst(value: float) -> float:
    return float(comm.allreduce(float(value), op=MPI.MAX))


def message(fn) -> list | None:
    try:
        fn()
        msg = None
    except SpmmgnnError as exc:
        msg = str(exc)
    return comm.gather(msg, root=0)


def grids() -> list[tuple[str, spmmgnn.ProcessGrid, str]]:
    if P != 4:
        return [("c1", spmmgnn.ProcessGrid(comm), "sparse1d")]
    return [("c2", spmmgnn.ProcessGrid(comm, replication=2), "sparse15d"),
            ("2d", spmmgnn.ProcessGrid(comm, shape=(2, 2)), "sparse2d"),
            ("3d", spmmgnn.ProcessGrid(comm, shape=(2, 1, 2)), "sparse3d")]


def matrices(n: int, communities: int = 4):
    """(SPD M = L + 0.1 I of a random graph, a normalized adjacency with communities whose
    top eigenvalues are separated), alike on every rank."""
    rng = np.random.default_rng(4)
    group = np.arange(n) % communities
    src, dst = rng.integers(0, n, (2, 12 * n))
    keep = (group[src] == group[dst]) | (rng.random(src.size) < 0.1)
    G = sp.coo_array((np.ones(keep.sum()), (src[keep], dst[keep])), shape=(n, n)).tocsr()
    G = ((G + G.T) > 0).astype(float)
    G.setdiag(0)
    G.eliminate_zeros()
    deg = np.asarray(G.sum(1)).ravel()
    M = sp.csr_array(sp.diags(deg + 0.1) - G)
    s = 1 / np.sqrt(deg + 1)
    N = sp.csr_array(sp.diags(s) @ (G + sp.eye(n)) @ sp.diags(s))
    return M, N


def check(tag: str, grid, algo: str, sizes: list[int]) -> None:
    n = sum(sizes)
    M, N = matrices(n)
    build = lambda A: spmmgnn.DistSpMM.from_scipy(A if grid.rank == 0 else None, grid,  # noqa: E731
                                                  algorithm=algo, partition=sizes)
    op = build(M)
    ids = op.row_ids("input")
    rng = np.random.default_rng(5)
    B = rng.standard_normal((n, 2))
    ref = spsolve(sp.csc_array(M), B)
    x, info = krylov.cg(op, B[ids, 0], tol=1e-10)
    out[f"{tag}:cg_vector"] = worst(np.abs(x - ref[ids, 0]).max(initial=0) / np.abs(ref).max())
    out[f"{tag}:cg_vector_shape"] = bool(comm.allreduce(x.shape == (len(ids),), op=MPI.LAND))
    out[f"{tag}:cg_converged"] = bool(comm.allreduce(info.converged, op=MPI.LAND))
    out[f"{tag}:cg_steps_same"] = len(set(comm.allgather(info.iterations))) == 1
    X, info2 = krylov.cg(op, B[ids], x0=np.ones((len(ids), 2)), tol=1e-10)
    out[f"{tag}:cg_block"] = worst(np.abs(X - ref[ids]).max(initial=0) / np.abs(ref).max())
    out[f"{tag}:cg_block_converged"] = bool(comm.allreduce(info2.converged, op=MPI.LAND))

    eop = build(N)
    k = 4
    theta, Q, einfo = krylov.subspace_iteration(eop, k, tol=1e-9, maxiter=2000)
    lam, U = eigsh(N, k=k, which="LM")
    lam = lam[np.argsort(-np.abs(lam))]
    out[f"{tag}:eig_values"] = worst(np.abs(theta - lam).max())
    V = eop.allgather_rows(Q)
    out[f"{tag}:eig_subspace"] = worst(np.abs(np.linalg.svd(U.T @ V, compute_uv=False)
                                              - 1).max())
    out[f"{tag}:eig_converged"] = bool(comm.allreduce(einfo.converged, op=MPI.LAND))
    out[f"{tag}:eig_same_bits"] = len({t.tobytes() for t in comm.allgather(theta)}) == 1

    neg = build(-M)
    msgs = message(lambda: krylov.cg(neg, B[neg.row_ids("input"), 0]))
    if comm.rank == 0:
        out[f"{tag}:err_not_spd"] = msgs
    skew = build(sp.csr_array(M + sp.triu(M, 1) * 0.5))
    msgs = message(lambda: krylov.cg(skew, B[skew.row_ids("input"), 0]))
    if comm.rank == 0:
        out[f"{tag}:err_not_symmetric"] = msgs
    msgs = message(lambda: krylov.as_linear_operator(op))
    if comm.rank == 0:
        out[f"{tag}:err_linear_operator"] = msgs


def main() -> None:
    for g, grid, algo in grids():
        k = grid.n_block_rows
        check(f"{g}:uneven", grid, algo, [40 + 7 * b for b in range(k)])
        if k > 1:
            check(f"{g}:empty", grid, algo, [0] + [50] * (k - 1))
    if comm.rank == 0:
        with open(sys.argv[1], "w") as fh:
            json.dump(out, fh)


if __name__ == "__main__":
    main()
