"""MPI worker: parameters distributed by rows (``nn.RowEmbedding``, ``nn.distributed_rows``)
next to replicated weights through ``nn.allreduce_gradients``, on every grid P allows (P = 2:
1D; P = 4: 1.5D c = 2, 2D 2x2, 3D 2x1x2), with uneven blocks and an empty one.

Usage: mpiexec -n P python row_params_cases.py OUT.json
A LightGCN-like model (embeddings propagated twice, averaged, then a replicated linear
layer) is checked against one process's torch on the whole table: the gradients of both
and the parameters after one Adam step; so is a table drawn by ``torch.randn`` after the same
seed on every rank and declared with ``distributed_rows``. Undeclared tables must be refused
on every rank, whatever their values.
Nothing is asserted here (one failing rank must not leave the others hanging).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch
from mpi4py import MPI

import spmmgnn
from spmmgnn.data.normalize import gcn_norm
from spmmgnn.nn import (
    RowEmbedding,
    allreduce_gradients,
    distributed_rows,
    replicated,
    spmm,
)

# the workers tests of several folders share (tests/workers/), imported as siblings
sys.path.insert(1, str(Path(__file__).resolve().parents[2] / "workers"))
from common import message  # noqa: E402

comm = MPI.COMM_WORLD
P = comm.size
out: dict = {}
DIM, CLASSES = 4, 3


def worst(value: float) -> float:
    return float(comm.allreduce(float(value), op=MPI.MAX))


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    if a.shape != b.shape:
        return float("inf")
    if b.numel() == 0:  # an empty block: nothing to compare
        return 0.0
    return float((a - b).abs().max()) / max(float(b.abs().max()), 1e-300)



def grids() -> list[tuple[str, spmmgnn.ProcessGrid, str]]:
    if P == 2:
        return [("c1", spmmgnn.ProcessGrid(comm), "sparse1d")]
    return [("c2", spmmgnn.ProcessGrid(comm, replication=2), "sparse15d"),
            ("2d", spmmgnn.ProcessGrid(comm, shape=(2, 2)), "sparse2d"),
            ("3d", spmmgnn.ProcessGrid(comm, shape=(2, 1, 2)), "sparse3d")]


def graph(n: int) -> sp.csr_array:
    A = sp.random(n, n, density=0.3, random_state=5, format="csr")
    return sp.csr_array(A + A.T)


def propagate(op_or_A, e: torch.Tensor) -> torch.Tensor:
    """LightGCN's layer average (E + A E + A A E) / 3, distributed or on the whole table."""
    if isinstance(op_or_A, torch.Tensor):
        ae = op_or_A @ e
        return (e + ae + op_or_A @ ae) / 3
    ae = spmm(op_or_A, e)
    return (e + ae + spmm(op_or_A, ae)) / 3


def check_training(tag: str, grid, algo: str, sizes) -> None:
    """Gradients and one Adam step of a registered table plus a replicated layer."""
    n = int(sum(sizes))
    A = graph(n)
    T = np.random.default_rng(7).standard_normal((n, CLASSES))
    op = spmmgnn.DistSpMM.from_scipy(A if grid.rank == 0 else None, grid, algorithm=algo,
                                     partition=list(sizes), normalize="gcn")
    emb = RowEmbedding(op, DIM, dtype=torch.float64, seed=3)
    init = emb.weight.detach().clone()
    torch.manual_seed(0)
    lin = torch.nn.Linear(DIM, CLASSES).double()
    params = [emb.weight, *lin.parameters()]
    opt = torch.optim.Adam(params, lr=0.05)
    opt.zero_grad()
    ids = emb.ids
    loss = ((lin(propagate(op, emb())) - torch.from_numpy(T[ids])) ** 2).sum()
    loss.backward()
    allreduce_gradients(params, op)
    grads = [p.grad.clone() for p in params]
    first = grid.across_replicas.bcast(grads[0].numpy(), root=0)
    out[f"{tag}:replicas_same_bits"] = bool(comm.allreduce(
        bool(np.array_equal(first, grads[0].numpy())), op=MPI.LAND))
    opt.step()

    # one process: the whole table (a one-rank RowEmbedding: the same init at any P)
    one = spmmgnn.DistSpMM.from_scipy(A, spmmgnn.ProcessGrid(MPI.COMM_SELF),
                                      normalize="gcn")
    ref_emb = RowEmbedding(one, DIM, dtype=torch.float64, seed=3)
    An = torch.from_numpy(gcn_norm(A).toarray())
    torch.manual_seed(0)
    ref_lin = torch.nn.Linear(DIM, CLASSES).double()
    ref_params = [ref_emb.weight, *ref_lin.parameters()]
    ref_opt = torch.optim.Adam(ref_params, lr=0.05)
    ref_opt.zero_grad()
    ((ref_lin(propagate(An, ref_emb())) - torch.from_numpy(T)) ** 2).sum().backward()
    ref_grads = [p.grad.clone() for p in ref_params]
    ref_opt.step()
    out[f"{tag}:init"] = worst(rel(init, RowEmbedding(one, DIM, dtype=torch.float64,
                                                      seed=3).weight.detach()[ids]))
    out[f"{tag}:grad_rows"] = worst(rel(grads[0], ref_grads[0][ids]))
    out[f"{tag}:grad_weight"] = worst(rel(grads[1], ref_grads[1]))
    out[f"{tag}:grad_bias"] = worst(rel(grads[2], ref_grads[2]))
    out[f"{tag}:step_rows"] = worst(rel(emb.weight.detach(), ref_emb.weight.detach()[ids]))
    out[f"{tag}:step_weight"] = worst(rel(lin.weight.detach(), ref_lin.weight.detach()))
    out[f"{tag}:step_bias"] = worst(rel(lin.bias.detach(), ref_lin.bias.detach()))


def check_seeded_table(tag: str, grid, algo: str) -> None:
    """The research client's table: ``torch.randn`` after the same ``torch.manual_seed`` on
    equal blocks (the same values on every rank), declared with ``distributed_rows``, next
    to a replicated linear layer: its gradients and one Adam step equal one process's torch
    on the whole table (each rank's rows put where their global ids say)."""
    k = grid.n_block_rows
    sizes = [4] * k
    n = sum(sizes)
    A = graph(n)
    T = np.random.default_rng(7).standard_normal((n, CLASSES))
    op = spmmgnn.DistSpMM.from_scipy(A if grid.rank == 0 else None, grid, algorithm=algo,
                                     partition=sizes, normalize="gcn")
    torch.manual_seed(0)
    table = torch.nn.Parameter(torch.randn(op.n_local, DIM, dtype=torch.float64))
    distributed_rows(table, op)
    lin = torch.nn.Linear(DIM, CLASSES).double()
    ids = op.row_ids()
    whole = torch.zeros(n, DIM, dtype=torch.float64)  # the table as one process holds it
    for got_ids, rows in comm.allgather((ids, table.detach().numpy())):
        whole[torch.from_numpy(got_ids)] = torch.from_numpy(rows)
    out[f"{tag}:seeded_equal_everywhere"] = bool(comm.allreduce(
        bool(np.array_equal(comm.bcast(table.detach().numpy(), root=0),
                            table.detach().numpy())), op=MPI.LAND))
    params = [table, *lin.parameters()]
    opt = torch.optim.Adam(params, lr=0.05)
    loss = ((lin(propagate(op, table)) - torch.from_numpy(T[ids])) ** 2).sum()
    loss.backward()
    allreduce_gradients(params, op)
    grads = [p.grad.clone() for p in params]
    opt.step()

    ref_table = torch.nn.Parameter(whole.clone())
    torch.manual_seed(0)
    torch.randn(op.n_local, DIM, dtype=torch.float64)  # the same draws as above
    ref_lin = torch.nn.Linear(DIM, CLASSES).double()
    ref_params = [ref_table, *ref_lin.parameters()]
    ref_opt = torch.optim.Adam(ref_params, lr=0.05)
    An = torch.from_numpy(gcn_norm(A).toarray())
    ((ref_lin(propagate(An, ref_table)) - torch.from_numpy(T)) ** 2).sum().backward()
    ref_grads = [p.grad.clone() for p in ref_params]
    ref_opt.step()
    out[f"{tag}:seeded:grad_rows"] = worst(rel(grads[0], ref_grads[0][ids]))
    out[f"{tag}:seeded:grad_weight"] = worst(rel(grads[1], ref_grads[1]))
    out[f"{tag}:seeded:grad_bias"] = worst(rel(grads[2], ref_grads[2]))
    out[f"{tag}:seeded:step_rows"] = worst(rel(table.detach(), ref_table.detach()[ids]))
    out[f"{tag}:seeded:step_bias"] = worst(rel(lin.bias.detach(), ref_lin.bias.detach()))


def check_refusals(tag: str, grid, algo: str) -> None:
    """Undeclared per-vertex tables are refused whatever their values (zeros and a seeded
    draw hold the same values on every rank when the blocks have equal sizes), named by
    position and by name; a replicated weight whose first dimension equals the row count
    goes through once declared; replicated weights of other values or shapes on some rank
    are refused; and a wrong registration."""
    k = grid.n_block_rows
    for name, sizes in (("equal", [3] * k), ("unequal", [2] + [3] * (k - 1))):
        n = sum(sizes)
        op = spmmgnn.DistSpMM.from_scipy(graph(n) if grid.rank == 0 else None, grid,
                                         algorithm=algo, partition=sizes)
        torch.manual_seed(0)
        tables = {"zeros": torch.zeros(op.n_local, DIM, dtype=torch.float64),
                  "seeded": torch.randn(op.n_local, DIM, dtype=torch.float64),
                  "drawn": torch.from_numpy(np.random.default_rng(1).standard_normal(
                      (n, DIM))[op.row_ids()])}
        for kind, init in tables.items():
            table = torch.nn.Parameter(init)
            torch.manual_seed(0)
            weight = torch.nn.Parameter(torch.randn(DIM, 2, dtype=torch.float64))

            def step(table=table, op=op, weight=weight, kind=kind):
                (spmm(op, table) @ weight).sum().backward()
                params = [weight, table]  # the table is parameter #1
                if kind == "drawn":
                    params = [("weight", weight), ("emb.table", table)]
                allreduce_gradients(params, op)

            msgs = message(step)
            if comm.rank == 0:
                out[f"{tag}:refuse_{name}_{kind}"] = msgs
        if name != "equal":
            continue
        # a replicated weight shaped like the rows: refused undeclared, summed once declared
        torch.manual_seed(0)
        head = torch.nn.Linear(DIM, op.n_local).double()  # weight: n_local x DIM
        x = torch.ones(op.n_local, DIM, dtype=torch.float64)

        def run_head(head=head, x=x, op=op):
            head.zero_grad()
            head(spmm(op, x)).sum().backward()
            allreduce_gradients(head.parameters(), op)

        msgs = message(run_head)
        replicated(head)
        declared = message(run_head)
        if comm.rank == 0:
            out[f"{tag}:head_undeclared"] = msgs
            out[f"{tag}:head_declared"] = declared
        # replicated weights that differ between ranks: other values, another shape
        for what, shape in (("values", (DIM, 2)), ("shape", (DIM, 2 + (comm.rank == 0)))):
            torch.manual_seed(comm.rank if what == "values" else 0)
            weight = replicated(torch.nn.Parameter(torch.randn(*shape, dtype=torch.float64)))

            def differing(weight=weight, op=op):
                (spmm(op, torch.ones(op.n_local_in, DIM, dtype=torch.float64))
                 @ weight).sum().backward()
                allreduce_gradients([weight], op)

            msgs = message(differing)
            if comm.rank == 0:
                out[f"{tag}:replicated_other_{what}"] = msgs
    op = spmmgnn.DistSpMM.from_scipy(graph(7) if grid.rank == 0 else None, grid,
                                     algorithm=algo)
    msgs = message(lambda: distributed_rows(torch.zeros(op.n_local + 1, 2), op))
    if comm.rank == 0:
        out[f"{tag}:refuse_register"] = msgs


def check_row_messages(tag: str, grid, algo: str) -> None:
    """The last rank passes rows of the wrong side: every rank gets its count and the fix."""
    k = grid.n_block_rows
    B = sp.random(3 * k + 1, 4 * k + 2, density=0.4, random_state=2, format="csr")
    op = spmmgnn.DistSpMM.from_scipy(B if grid.rank == 0 else None, grid, algorithm=algo)
    last = grid.rank == P - 1
    x = np.ones(op.n_local if last else op.n_local_in)  # the last rank: output-side rows
    msgs = message(lambda: op.norm(x))
    if comm.rank == 0:
        out[f"{tag}:rows_message"] = msgs
        out[f"{tag}:rows_expected"] = None
    expect = comm.bcast(op.n_local_in if last else None, root=P - 1)
    if comm.rank == 0:
        out[f"{tag}:rows_expected"] = expect


def main() -> None:
    for g, grid, algo in grids():
        k = grid.n_block_rows
        check_training(f"{g}:uneven", grid, algo, [5 + 2 * b for b in range(k)])
        check_training(f"{g}:empty", grid, algo, [0] + [4] * (k - 1))
        check_training(f"{g}:equal", grid, algo, [4] * k)
        check_seeded_table(g, grid, algo)
        check_refusals(g, grid, algo)
        check_row_messages(g, grid, algo)
    if comm.rank == 0:
        with open(sys.argv[1], "w") as fh:
            json.dump(out, fh)


if __name__ == "__main__":
    main()
