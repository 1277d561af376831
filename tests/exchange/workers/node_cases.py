"""MPI worker: the node-aware exchange against the flat one and scipy, and its bytes per tier.

Usage: mpiexec -n P python node_cases.py OUT.json
For each ranks-per-node K of ``KS[P]`` (consecutive ranks grouped into nodes, the last node
smaller when K does not divide P) and each sparse algorithm (sparse1d, sparse15d c = 2,
prepost1d, sparse2d and sparse3d on a grid of P, and the cd-2 delayed views of sparse1d),
one non-symmetric matrix with uneven blocks (one empty) and hub rows/columns is multiplied
with exchange="flat", "node" and "auto": ``A @ X`` and ``A.T @ Y`` are compared with scipy
and with the flat exchange (bitwise where only rows are copied or read in place, to
rounding where partial sums are added in another order), in the worker; ``NodePlan``
through its shared window (copied and read in place) against its messages, bitwise. Rank 0
writes the matrix, the layout and
every rank's bytes by tier, per call and direction, for the test to compare with the volume
model, plus the list of mismatches (empty when all is well).
"""

from __future__ import annotations

import json
import sys

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

import spmmgnn
from spmmgnn.algorithms.delayed import DelayedRemote
from spmmgnn.exchange.node_exchange import NodePlan

comm = MPI.COMM_WORLD
P = comm.size
ROOT = comm.rank == 0
KS = {2: [1, 2], 4: [1, 2, 3], 6: [2, 3, 4], 8: [2, 3, 4]}
SHAPES = {2: [(2, 1), (1, 1, 2)], 4: [(2, 2), (1, 2, 2)], 6: [(3, 2), (1, 3, 2)],
          8: [(4, 2), (2, 2, 2)]}
F = 3
# a bcast copies rows: the node-aware result is the flat one bit for bit
BITWISE_FORWARD = {"sparse1d", "sparse15d", "prepost1d"}


def matrix(k: int):
    n = 7 * k + 5
    A = sp.lil_array(sp.random(n, n, density=0.12, random_state=40 + k, format="csr"))
    A[0, :] = 1.0          # hubs: rows many ranks need
    A[:, n - 1] = 2.0
    parts = np.random.default_rng(100 + k).integers(0, k, n)
    if k > 2:
        parts[parts == 1] = 0  # an empty block (at k = 2 both blocks hold rows)
    return sp.csr_array(A), parts


def tiers(op) -> dict:
    s = op.comm_stats()
    return dict(sent=s["bytes_sent"], received=s["bytes_received"],
                sent_inter=s["bytes_sent_by_tier"]["inter"],
                received_inter=s["bytes_received_by_tier"]["inter"],
                node_exchanges=s["node_exchanges"], exchanges=s["exchanges"],
                shared=s["bytes_shared_read"], sent_intra=s["bytes_sent_by_tier"]["intra"])


IN_PLACE = ("sparse1d", "sparse15d", "prepost1d", "sparse2d", "sparse3d")


def _reader(op):
    """The ``GhostBlock`` whose rows the node exchange lets the operator read in place."""
    if op.name == "prepost1d":
        return op.received
    return op.product.expanded if op.name in ("sparse2d", "sparse3d") else op.product.block


class Run:
    def __init__(self):
        self.errors: list[str] = []
        self.runs: list[dict] = []

    def check(self, ok: bool, what: str) -> None:
        if ROOT and not ok:
            self.errors.append(what)

    def spmm(self, label: str, A, parts, grid, algorithm: str, K: int, c: int, shape,
             codec=None) -> None:
        """Flat, node and auto operators of one case; results and bytes."""
        n = A.shape[0]
        X = np.random.default_rng(1).standard_normal((n, F))
        Y = np.random.default_rng(2).standard_normal((n, F))
        got, ranks = {}, {}
        opts = {} if codec is None else dict(codec=codec)
        auto = K == KS[P][-1] and codec is None   # auto: at one K per P (it builds both)
        for exchange in ("flat", "node", "auto")[:3 if auto else 2]:
            op = spmmgnn.DistSpMM.from_scipy(A if ROOT else None, grid, algorithm=algorithm,
                                             partition=parts, exchange=exchange, **opts)
            x, y = op.scatter_rows(X), op.scatter_rows(Y, side="output")
            op.reset_stats()
            z = op.matmul(x)
            fwd = tiers(op)
            op.reset_stats()
            t = op.matmul_t(y)
            bwd = tiers(op)
            got[exchange] = (op.gather_rows(z), op.gather_rows(t, side="input"))
            if exchange == "node" and algorithm in IN_PLACE:
                # ranks sharing memory read their node's ghost rows in place
                everywhere = comm.allreduce(int(_reader(op).in_place), op=MPI.MIN)
                self.check(bool(everywhere), f"{label} {algorithm} K={K}: not in place")
            if exchange == "auto" and algorithm in IN_PLACE:
                # the model prices what the product does: reads in place cost no more than
                # copies, and the choice is labelled as made for an in-place read
                rb = F * X.itemsize
                fold = getattr(getattr(op, "product", None), "fold", None)
                for plan in (_reader(op).plan, fold):   # (not sparse3d's fiber plan)
                    if plan is not None and plan.node.reads_in_place:
                        fwd_ip, bwd_ip = plan.seconds(rb, rb, True), plan.seconds(rb, rb, False)
                        copy = plan.seconds(rb, rb)
                        self.check(fwd_ip[1] <= copy[1] and bwd_ip[1] <= copy[1]
                                   and fwd_ip[0] == copy[0],
                                   f"{label} {algorithm} K={K}: in-place model {fwd_ip} "
                                   f"{bwd_ip} vs copies {copy}")
                        # (the fold's spread of Y is multiplied transposed: landed)
                        copies = plan is fold
                        self.check(all(k.endswith(" in place") or copies and k.startswith("bcast")
                                       for k in plan.choices),
                                   f"{label} {algorithm} K={K}: choices {plan.choices}")
            route = (op.route(F, X.dtype, True) if getattr(type(op), "bounded_by", None)
                     else "sparse")   # sparse2d/3d: the flat exchange may take SUMMA
            ranks[exchange] = comm.gather(dict(fwd=fwd, bwd=bwd, report=op.exchange_report(),
                                               route=route))
        if not ROOT:
            return
        what = f"{label} {algorithm} K={K} c={c} shape={shape} codec={codec}"
        (zf, tf), (zn, tn) = got["flat"], got["node"]
        if codec is None:
            self.check(np.allclose(zn, A @ X, atol=1e-12), f"{what}: A X != scipy")
            self.check(np.allclose(tn, A.T @ Y, atol=1e-12), f"{what}: A^T Y != scipy")
            if algorithm in BITWISE_FORWARD:
                self.check(np.array_equal(zn, zf), f"{what}: A X not bitwise the flat one")
        elif codec == "bfloat16":  # a deterministic cast, on the inter-node leg only
            if K == 1:  # every peer on another node: the flat exchange casts the same rows
                self.check(np.array_equal(zn, zf), f"{what}: bfloat16 A X not the flat one")
            bound = 2.0 ** -8 * (abs(A) @ abs(X)) + 1e-12
            self.check(bool(np.all(abs(zn - A @ X) <= bound)), f"{what}: bfloat16 A X")
            bound = 2.0 ** -7 * (abs(A).T @ abs(Y)) + 1e-12
            self.check(bool(np.all(abs(tn - A.T @ Y) <= bound)), f"{what}: bfloat16 A^T Y")
        else:  # stochastic int8: each decoded value within one step of its row's range
            rng_rows = X.max(axis=1) - X.min(axis=1)
            bound = (abs(A) @ rng_rows)[:, None] * 1.05 / 255 + 1e-12
            self.check(bool(np.all(abs(zn - A @ X) <= bound)), f"{what}: int8 A X off")
        self.check(np.allclose(tn, tf, rtol=1e-12, atol=1e-12) or codec is not None,
                   f"{what}: A^T Y off the flat one beyond rounding")
        if auto:
            za, ta = got["auto"]
            self.check(np.allclose(za, zf, atol=1e-12) and np.allclose(ta, tf, atol=1e-12),
                       f"{what}: auto")
        self.runs.append(dict(case=label, algorithm=algorithm, K=K, c=c, shape=shape, f=F,
                              itemsize=8, codec=codec, ranks=ranks))

    def delayed(self, A, parts, grid, K: int) -> None:
        """cd-2 views (both backwards) of sparse1d, flat vs node, call by call."""
        n = A.shape[0]
        for backward in ("local", "delayed"):
            seen = {}
            for exchange in ("flat", "node"):
                op = spmmgnn.DistSpMM.from_scipy(A if ROOT else None, grid,
                                                 algorithm="sparse1d", partition=parts,
                                                 exchange=exchange)
                view = DelayedRemote(op, 2, False, backward, seed=3).views(1)[0]
                outs = []
                op.reset_stats()
                for t in range(4):  # each bin posted twice, the last two drained
                    x = op.scatter_rows(np.random.default_rng(10 + t).standard_normal((n, F)))
                    y = op.scatter_rows(np.random.default_rng(20 + t).standard_normal((n, F)),
                                        side="output")
                    outs.append((op.gather_rows(view.matmul(x)),
                                 op.gather_rows(view.matmul_t(y), side="input")))
                view.drain()
                seen[exchange] = (outs, comm.gather(tiers(op)))
            if not ROOT:
                continue
            pairs = zip(seen["flat"][0], seen["node"][0], strict=True)
            for t, ((zf, tf), (zn, tn)) in enumerate(pairs):
                self.check(np.array_equal(zf, zn), f"delayed {backward} K={K} call {t}: A X")
                self.check(np.allclose(tf, tn, rtol=1e-12, atol=1e-12),
                           f"delayed {backward} K={K} call {t}: A^T Y")
            self.runs.append(dict(case="delayed", algorithm="sparse1d", K=K, c=1,
                                  backward=backward, f=F, itemsize=8,
                                  ranks={"flat": seen["flat"][1], "node": seen["node"][1]}))


def window_vs_messages(run: Run, grid, K: int) -> None:
    """NodePlan with its intra-node legs through the shared window and through messages:
    three calls each way (both halves of the windows, two slots in flight at once), bitwise
    equal, the bcast equal to the rows themselves."""
    n = 5 * P + 3
    offsets = np.linspace(0, n, P + 1).astype(np.int64)
    offsets[1] = 0                                          # an empty block
    lo, hi = offsets[comm.rank], offsets[comm.rank + 1]
    pick = np.random.default_rng(70 + comm.rank).random(n) < 0.4
    pick[lo:hi] = False
    ghost_ids = np.flatnonzero(pick)
    got = {}
    for shared in (True, False):
        plan = NodePlan(comm, offsets, ghost_ids, nodes=grid.node_map(comm), shared=shared)
        rows = []
        for t in range(3):
            X = np.random.default_rng(t).standard_normal((n, F))
            G = np.random.default_rng(9 + t).standard_normal((ghost_ids.size, F))
            g0, g1 = np.empty((ghost_ids.size, F)), np.empty((ghost_ids.size, F))
            a = plan.start_bcast(X[lo:hi], g0, slot=0)
            b = plan.start_bcast(2 * X[lo:hi], g1, slot=1)
            a.finish()
            b.finish()
            out = np.ones((hi - lo, F))
            plan.reduce(G, out)
            rows.append((g0, g1, out))
            run.check(np.array_equal(g0, X[ghost_ids]) and np.array_equal(g1, 2 * X[ghost_ids]),
                      f"window K={K} shared={shared}: bcast rows")
            if shared:  # read in place: two slots in flight, each half of each window
                a = plan.start_bcast_in_place(X[lo:hi], slot=0)
                b = plan.start_bcast_in_place(3 * X[lo:hi], slot=1)
                ra, rb = a.finish(), b.finish()
                ok = (np.array_equal(ra[plan.ghost_slots], X[ghost_ids])
                      and np.array_equal(rb[plan.ghost_slots], 3 * X[ghost_ids]))
                ok = comm.allreduce(int(ok), op=MPI.MIN)
                run.check(bool(ok), f"window K={K} call {t}: rows read in place")
        got[shared] = rows
        run.check(plan.shared == shared, f"window K={K}: shared={plan.shared}")
        plan.close()
    same = all(np.array_equal(u, v) for s, m in zip(got[True], got[False], strict=True)
               for u, v in zip(s, m, strict=True))
    run.check(bool(comm.allreduce(int(same), op=MPI.MIN)), f"window K={K}: != messages")


def main(out: str) -> None:
    run, cases = Run(), {}
    for K in KS[P]:
        window_vs_messages(run, spmmgnn.ProcessGrid(comm, ranks_per_node=K), K)
        for c in (1, 2):
            k = P // c
            A, parts = matrix(k)
            cases[f"k{k}"] = dict(n=A.shape[0], rows=A.tocoo().row.tolist(),
                                  cols=A.tocoo().col.tolist(), vals=A.tocoo().data.tolist(),
                                  parts=parts.tolist())
            grid = spmmgnn.ProcessGrid(comm, replication=c, ranks_per_node=K)
            if c == 1:
                for algo in ("sparse1d", "prepost1d"):
                    run.spmm(f"k{k}", A, parts, grid, algo, K, c, None)
                if K != KS[P][-1]:
                    run.delayed(A, parts, grid, K)
                if K <= 2:
                    for codec in ("bfloat16", "int8"):
                        run.spmm(f"k{k}", A, parts, grid, "sparse1d", K, c, None, codec)
            run.spmm(f"k{k}", A, parts, grid, "sparse15d", K, c, None)
        A, parts = matrix(P)
        for shape in SHAPES[P]:
            grid = spmmgnn.ProcessGrid(comm, shape=shape, ranks_per_node=K)
            algo = "sparse2d" if len(shape) == 2 else "sparse3d"
            run.spmm(f"k{P}", A, parts, grid, algo, K, 1, list(shape))
    if ROOT:
        with open(out, "w") as fh:
            json.dump(dict(P=P, cases=cases, runs=run.runs, errors=run.errors), fh)


if __name__ == "__main__":
    main(sys.argv[1])
