"""MPI worker: the device path (``ProcessGrid(device=DEVICE)``) against scipy and against the
numpy/numba path (``device=None``) on the awkward matrices of ``spmm_cases``.

Usage: mpiexec -n P python device_cases.py OUT.json [DEVICE] (default cpu).
Rank 0 writes a JSON object: ``cases`` (one entry per case, algorithm, c, codec, dtype, f)
and ``errors`` (the messages each rank got for wrong input).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
from mpi4py import MPI

import spmmgnn
from spmmgnn.runtime.errors import SpmmgnnError

# the workers tests of several folders share (tests/workers/), imported as siblings
sys.path.insert(1, str(Path(__file__).resolve().parents[2] / "workers"))
from spmm_cases import _rel, cases  # noqa: E402

comm = MPI.COMM_WORLD
P = comm.size
CODEC_CASES = ("uneven_empty_block", "part_vector")
BYTES = ("bytes_sent", "bytes_received", "payload_bytes_sent", "exchanges", "allreduce_bytes")


def chosen(stats: dict) -> list:
    """The plans ``exchange="auto"`` ran, by direction and bytes per row (whether the
    numpy path read them in place aside: the device path never does)."""
    picked = stats.get("exchange", {}).get("chosen", {})
    return sorted((k.removesuffix(" in place"), v) for k, v in picked.items())


def run(op, X, dtype, device):
    """(A X, A.T X gathered on root as numpy, stats of the two calls); ``device``: the
    grid's (None: numpy in and out)."""
    xt = X if device is None else torch.from_numpy(X).to(op.device)
    xl = op.scatter_rows(xt if comm.rank == 0 else None)
    op.reset_stats()
    yl = op.matmul(xl)
    tl = op.matmul_t(xl)
    stats = op.comm_stats()
    if device is not None:
        assert isinstance(yl, torch.Tensor) and yl.device == op.device, (type(yl), device)
        assert tl.device == op.device and tl.dtype == xl.dtype
    Y, T = op.gather_rows(yl), op.gather_rows(tl)
    if comm.rank == 0 and device is not None:
        assert Y.device == op.device
        Y, T = Y.cpu().numpy(), T.cpu().numpy()
    return Y, T, stats


def errors(grid, A) -> dict:
    """Wrong input on a device grid: one message on every rank."""
    op = spmmgnn.DistSpMM.from_scipy(A if comm.rank == 0 else None, grid)
    x = torch.ones(op.n_local_in, 2, dtype=torch.float64, device=grid.device)
    got = {}
    tries = {
        "numpy_everywhere": lambda: op.matmul(np.ones((op.n_local_in, 2))),
        "numpy_on_rank_1": lambda: op.matmul(np.ones((op.n_local_in, 2)) if comm.rank == 1 % P
                                             else x),
        "meta_on_last": lambda: op.matmul_t(torch.ones(op.n_local, 2, device="meta")
                                            if comm.rank == P - 1 else
                                            torch.ones(op.n_local, 2, dtype=torch.float64,
                                                       device=grid.device)),
        "nan_on_rank_0": lambda: op.matmul(x * float("nan") if comm.rank == 0 else x),
        "scatter_numpy": lambda: op.scatter_rows(np.ones((A.shape[0], 2))
                                                 if comm.rank == 0 else None),
        "gather_numpy": lambda: op.gather_rows(np.ones((op.n_local, 2))),
        "dot_numpy": lambda: op.dot(np.ones((op.n_local_in, 2)), np.ones((op.n_local_in, 2)),
                                    side="input"),
    }
    for name, fn in tries.items():
        try:
            fn()
            got[name] = None
        except SpmmgnnError as exc:
            got[name] = [str(exc), bool(exc.collective)]
    # the operator works after every refusal, and dot/norm come back on the device
    d = op.dot(x, x, side="input")
    got["dot_after"] = [float(d.sum()), str(d.device)]
    return got


def main() -> None:
    path = sys.argv[1]
    device = sys.argv[2] if len(sys.argv) > 2 else "cpu"
    results = []
    grids = [(1, "sparse1d", "flat"), (1, "sparse15d", "flat"), (1, "oblivious1d", "flat"),
             (1, "oblivious15d", "flat"), (1, "prepost1d", "flat")]
    grids += [(2, "sparse15d", "flat"), (2, "oblivious15d", "flat")] if P % 2 == 0 else []
    # the node-aware exchange on nodes of two ranks (the last one alone when P is odd)
    grids += [(1, "sparse1d", "node"), (1, "prepost1d", "node"), (1, "sparse1d", "auto")]
    for c, algo, exchange in grids:
        K = None if exchange == "flat" else 2
        dev_grid = spmmgnn.ProcessGrid(comm, replication=c, device=device, ranks_per_node=K)
        np_grid = spmmgnn.ProcessGrid(comm, replication=c, ranks_per_node=K)
        for name, A, spec in cases(dev_grid.n_block_rows):
            # the cast codecs on the cases with uneven and empty blocks, at one width
            takes = spmmgnn.ALGORITHMS[algo].takes_codecs
            codecs = ((None, "float16", "bfloat16", "int8", "int4", "int2")
                      if name in CODEC_CASES and takes else (None,))
            if exchange != "flat":
                codecs = codecs[::2]
            for codec in codecs:
                opts = dict(exchange=exchange) if exchange != "flat" else {}
                opts.update({"codec": codec} if codec else {})
                ops = [spmmgnn.DistSpMM.from_scipy(A if comm.rank == 0 else None, g,
                                                   algorithm=algo, partition=spec, **opts)
                       for g in (dev_grid, np_grid)]
                for dtype in ("float32", "float64"):
                    for f in ((5,) if codec or not takes else (1, 5)):
                        X = np.random.default_rng(f).standard_normal(
                            (A.shape[0], f)).astype(dtype)
                        Yd, Td, sd = run(ops[0], X, dtype, dev_grid.device)
                        Yn, Tn, sn = run(ops[1], X, dtype, None)
                        plan = getattr(ops[0], "plan", None)
                        sd["staged_rows"] = (plan.n_send + plan.n_ghost
                                             if plan and exchange == "flat" else 0)
                        both = comm.gather((sd, sn), root=0)
                        if comm.rank != 0:
                            continue
                        Ad = A.astype(dtype)
                        results.append(dict(
                            case=name, algorithm=algo, c=c, codec=codec, dtype=dtype, f=f,
                            exchange=exchange,
                            itemsize=np.dtype(dtype).itemsize,
                            err=_rel(Yd, Ad @ X), err_t=_rel(Td, Ad.T @ X),
                            err_np=_rel(Yd, Yn), err_np_t=_rel(Td, Tn),
                            same_bytes=all({k: a[k] for k in BYTES} == {k: b[k] for k in BYTES}
                                           for a, b in both),
                            same_choices=all(chosen(a) == chosen(b) for a, b in both),
                            ranks=[dict(device_host_sent=a["bytes_sent_by_tier"]["device_host"],
                                        device_host_received=a["bytes_received_by_tier"][
                                            "device_host"],
                                        bytes_sent=a["bytes_sent"],
                                        bytes_received=a["bytes_received"],
                                        allreduce_bytes=a["allreduce_bytes"],
                                        staged_rows=a["staged_rows"],
                                        numpy_device_host=b["bytes_sent_by_tier"]["device_host"])
                                   for a, b in both]))
    errs = errors(spmmgnn.ProcessGrid(comm, device=device), cases(P)[1][1])
    every = comm.gather(errs, root=0)
    if comm.rank == 0:
        with open(path, "w") as fh:
            json.dump(dict(cases=results, errors=every), fh)


if __name__ == "__main__":
    main()
