"""The research recipes (docs/research-recipes.md) timed against scipy in one process.

    mpiexec -n P python -m bench.recipes GRID      # GRID: 1d, c2, 2x2 or 2x1x2
    python -m bench.recipes_table --write docs/research-recipes.md   # all five, the docs table

Four workloads, the recipes' graphs and sizes: APPNP propagation (50 steps, f = 8),
PageRank (50 steps, a vector), CG (two right-hand sides to 1e-10, ``spmmgnn.krylov.cg``
against ``scipy.sparse.linalg.cg`` per column) and 8 eigenpairs by subspace iteration
(``krylov.subspace_iteration`` against the same iteration in numpy; scipy's ``eigsh``,
Lanczos, is listed beside it). Rank 0 runs the scipy side first while the others wait
without spinning (``errors.wait_for_root``); then every rank runs the distributed side.
Each time is the best of 3; the distributed one is the slowest rank's. Prints one Markdown
row per workload: grid, workload, distributed seconds, scipy seconds, their ratio.
"""

from __future__ import annotations

import sys
import time

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI
from scipy.sparse.linalg import cg as scipy_cg
from scipy.sparse.linalg import eigsh

import spmmgnn
from spmmgnn import krylov
from spmmgnn.data.normalize import gcn_norm
from spmmgnn.local.hashing import uniform_by_id
from spmmgnn.runtime.errors import wait_for_root
from spmmgnn.runtime.wire import bcast_json

comm = MPI.COMM_WORLD
STEPS = 50


def build_grid(name: str) -> tuple[spmmgnn.ProcessGrid, str]:
    if name in ("1d", "c2"):
        return spmmgnn.ProcessGrid(comm, replication=2 if name == "c2" else 1), "sparse15d"
    shape = tuple(int(s) for s in name.split("x"))
    return spmmgnn.ProcessGrid(comm, shape=shape), f"sparse{len(shape)}d"


def best(fn, repeat: int = 3) -> float:
    """The best of ``repeat`` wall times of fn (collective: the slowest rank's)."""
    times = []
    for _ in range(repeat):
        comm.Barrier()
        t0 = time.perf_counter()
        fn()
        times.append(comm.allreduce(time.perf_counter() - t0, op=MPI.MAX))
    return min(times)


def on_root(fn) -> float:
    """Best of 3 of fn on rank 0 alone; the others wait without spinning."""
    t = 0.0
    if comm.rank == 0:
        t = min(_timed(fn) for _ in range(3))
    wait_for_root(comm)
    return bcast_json(comm, t)


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def appnp_matrix(n: int = 3000) -> sp.csr_array:
    A = sp.random(n, n, density=5 / n, format="csr", random_state=0)
    A.setdiag(0)
    A.eliminate_zeros()
    return sp.csr_array(A)


def pagerank_matrix(n: int = 5000) -> sp.csr_array:
    edges = np.random.default_rng(1).zipf(2.0, (2, 40000)) % n
    return sp.coo_array((np.ones(edges.shape[1]), (edges[1], edges[0])), shape=(n, n)).tocsr()


def cg_matrix(n: int = 4000, lam: float = 2.0) -> sp.csr_array:
    G = sp.random(n, n, density=6 / n, format="csr", random_state=4)
    G = ((G + G.T) > 0).astype(float)
    G.setdiag(0)
    G.eliminate_zeros()
    L = sp.diags(np.asarray(G.sum(axis=1)).ravel()) - G
    return sp.csr_array(sp.eye(n) + lam * L)


def eig_matrix(n: int = 2000) -> sp.csr_array:
    rng = np.random.default_rng(2)
    group = np.arange(n) % 8
    src, dst = rng.integers(0, n, (2, 200000))
    keep = (group[src] == group[dst]) | (rng.random(src.size) < 0.05)
    A = sp.coo_array((np.ones(keep.sum()), (src[keep], dst[keep])), shape=(n, n)).tocsr()
    return sp.csr_array(((A + A.T) > 0).astype(float))


def numpy_subspace(A, k: int, b: int, tol: float, x0: np.ndarray) -> int:
    """The iteration of ``krylov.subspace_iteration`` in one process (numpy + scipy)."""
    q, _ = np.linalg.qr(x0)
    for it in range(1, 2000):
        aq = A @ q
        if it % krylov.RAYLEIGH_RITZ_EVERY == 0:
            theta, w = np.linalg.eigh(q.T @ aq)
            order = np.argsort(-np.abs(theta))
            theta, q, aq = theta[order], q @ w[:, order], aq @ w[:, order]
            res = np.linalg.norm(aq[:, :k] - q[:, :k] * theta[:k], axis=0).max()
            if res <= tol * np.abs(theta).max():
                return it
        q, _ = np.linalg.qr(aq)
    return it


def main() -> None:
    grid, algo = build_grid(sys.argv[1] if len(sys.argv) > 1 else "1d")
    label = f"P = {comm.size}, {sys.argv[1] if len(sys.argv) > 1 else '1d'}"
    rows = []

    # APPNP: z <- 0.9 Â z + 0.1 h, 50 steps, f = 8
    A = appnp_matrix()
    op = spmmgnn.DistSpMM.from_scipy(A, grid, algorithm=algo, normalize="gcn")
    H = np.random.default_rng(0).standard_normal((A.shape[0], 8))
    h = H[op.row_ids("input")]
    Ahat = gcn_norm(A)

    def appnp(mul, h):
        z = h
        for _ in range(STEPS):
            z_next = 0.9 * mul(z) + 0.1 * h
            z = z_next
        return z

    rows.append(("APPNP, 50 steps, f = 8", best(lambda: appnp(op.matmul, h)),
                 on_root(lambda: appnp(lambda z: Ahat @ z, H))))

    # PageRank: 50 steps of a vector, the dangling mass and the change reduced each step
    A = pagerank_matrix()
    n = A.shape[0]
    op = spmmgnn.DistSpMM.from_scipy(A, grid, algorithm=algo)
    deg = op.matmul_t(np.ones(op.n_local))
    inv = np.divide(1.0, deg, out=np.zeros_like(deg), where=deg > 0)
    full_deg = np.asarray(A.sum(axis=0)).ravel()
    full_inv = np.divide(1.0, full_deg, out=np.zeros(n), where=full_deg > 0)

    def pagerank(mul, inv, dangling, total):
        x = np.full(inv.size, 1 / n)
        for _ in range(STEPS):
            d = total(x[dangling].sum())
            x_next = 0.85 * (mul(inv * x) + d / n) + 0.15 / n
            total(np.abs(x_next - x).sum())
            x = x_next
        return x

    rows.append(("PageRank, 50 steps", best(lambda: pagerank(op.matmul, inv, deg == 0,
                                                             op.allreduce)),
                 on_root(lambda: pagerank(lambda v: A @ v, full_inv, full_deg == 0, float))))

    # CG: two right-hand sides to a relative residual of 1e-10
    M = cg_matrix()
    op = spmmgnn.DistSpMM.from_scipy(M, grid, algorithm=algo)
    Y = np.random.default_rng(4).standard_normal((M.shape[0], 2))
    y = Y[op.row_ids("input")]
    op.probe_symmetry()
    steps = krylov.cg(op, y, tol=1e-10)[1].iterations
    rows.append((f"CG, 2 right-hand sides, {steps} steps",
                 best(lambda: krylov.cg(op, y, tol=1e-10)),
                 on_root(lambda: [scipy_cg(M, Y[:, j], rtol=1e-10) for j in range(2)])))

    # 8 eigenpairs, block 12, tol 1e-8
    E = gcn_norm(eig_matrix())
    op = spmmgnn.DistSpMM.from_scipy(E, grid, algorithm=algo)
    op.probe_symmetry()
    t_dist = best(lambda: krylov.subspace_iteration(op, 8, block=12, tol=1e-8))
    its = krylov.subspace_iteration(op, 8, block=12, tol=1e-8)[2].iterations
    keys = np.arange(E.shape[0], dtype=np.int64)[:, None] * 12 + np.arange(12)
    X0 = uniform_by_id(keys.reshape(-1), 0).reshape(-1, 12) - 0.5  # the library's start
    rows.append((f"8 eigenpairs, subspace iteration ({its} steps)", t_dist,
                 on_root(lambda: numpy_subspace(E, 8, 12, 1e-8, X0))))
    t_eigsh = on_root(lambda: eigsh(E, k=8, which="LM"))
    if comm.rank == 0:
        for name, dist, ref in rows:
            print(f"| {label} | {name} | {dist * 1e3:.1f} | {ref * 1e3:.1f} | "
                  f"{dist / ref:.2f} |")
        print(f"| {label} | (scipy eigsh, Lanczos, for reference) | | {t_eigsh * 1e3:.1f} | |")


if __name__ == "__main__":
    main()
