"""MPI worker: the ``device_host`` bytes ``comm_stats()`` counts on a device grid over MPI,
per rank, forward and transpose, for the volume model's cases (``bench_volumes.cases``), for
every registered family whose device leg the model projects (``device_leg_modelled``).

Usage: mpiexec -n P python device_volumes.py OUT.json [DEVICE] (default cpu).
Rank 0 writes {"cases": {name: {"n", "rows", "cols", "parts"}}, "runs": [...]}.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
from mpi4py import MPI

import spmmgnn
from spmmgnn.benchmark.device_volumes import device_leg_modelled

# the workers tests of several folders share (tests/workers/), imported as siblings
sys.path.insert(1, str(Path(__file__).resolve().parents[2] / "workers"))
from bench_volumes import cases, saved_case  # noqa: E402

comm = MPI.COMM_WORLD
P = comm.size
ONE_D = ("sparse1d", "oblivious1d", "prepost1d")
FAMILIES = [a for a in spmmgnn.ALGORITHMS if device_leg_modelled(a)]


def tiers(op) -> dict:
    s = op.comm_stats()
    return dict(to_host=int(s["bytes_sent_by_tier"]["device_host"]),
                to_device=int(s["bytes_received_by_tier"]["device_host"]))


def device_bytes(op) -> int:
    """Bytes of the operator's device copies: its torch CSR blocks and the send-row index
    tensors its halo plans made on the grid's backend."""
    be = op.grid.backend
    total = sum(block.nbytes() for block in op.backend_blocks())
    for plan in op.exchange_plans():
        found = be._index.get(id(plan.send_idx))
        if found is not None and found[0] is plan.send_idx:
            total += int(found[1].nbytes)
    return total


def measure(grid, A, parts, algo: str, codec, dtype, f: int) -> list | None:
    """Every rank's device_host bytes and device blocks after a matmul and a matmul_t (on
    rank 0; None elsewhere)."""
    opts = {} if codec is None else dict(codec=codec)
    op = spmmgnn.DistSpMM.from_scipy(A if comm.rank == 0 else None, grid, algorithm=algo,
                                     partition=parts, **opts)
    X = np.random.default_rng(0).standard_normal((A.shape[0], f))
    x = op.scatter_rows(torch.from_numpy(X.astype(dtype)).to(grid.device)
                        if comm.rank == 0 else None)
    op.reset_stats()
    op.matmul(x)
    fwd = dict(tiers(op), blocks=device_bytes(op))
    op.reset_stats()
    op.matmul_t(x)
    bwd = dict(tiers(op), blocks=device_bytes(op))
    return comm.gather(dict(**fwd, **{f"{key}_t": v for key, v in bwd.items()}), root=0)


def main(out: str, device: str) -> None:
    runs, saved = [], {}
    # MPI (staged) for every c; torch.distributed (nothing staged) at c = 1 and c = P
    points = [(c, "mpi") for c in range(1, P + 1) if P % c == 0] + [(1, "torch"),
                                                                      (P, "torch")]
    for c, transport in points:
        grid = spmmgnn.ProcessGrid(comm, replication=c, device=device, transport=transport)
        algorithms = [a for a in FAMILIES if c == 1 or a not in ONE_D]
        k = P // c
        for name, (A, parts) in cases(k).items():
            saved[f"{name}-k{k}"] = saved_case(A, parts)
            for algo in algorithms:
                takes = spmmgnn.ALGORITHMS[algo].takes_codecs
                codecs = [None, "bfloat16", "int8"] if takes and name != "hubs" else [None]
                if transport == "torch":
                    codecs = codecs[:1]
                for codec in codecs:
                    for dtype, f in ((np.float32, 6), (np.float64, 3)):
                        ranks = measure(grid, A, parts, algo, codec, dtype, f)
                        if comm.rank == 0:
                            runs.append(dict(case=f"{name}-k{k}", algorithm=algo, c=c, f=f,
                                             itemsize=np.dtype(dtype).itemsize, codec=codec,
                                             transport=transport, ranks=ranks))
    if comm.rank == 0:
        with open(out, "w") as fh:
            json.dump(dict(P=P, algorithms=FAMILIES, cases=saved, runs=runs), fh)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "cpu")
