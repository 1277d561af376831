"""MPI worker: delayed remote aggregates (DistGNN cd-r, 0c) on sparse1d, call by call.

Usage: mpiexec -n P python delayed_cases.py OUT.json [DEVICE [CODEC]]
(DEVICE: a ProcessGrid device, "none" for the numpy path; CODEC: the exchange's codec)
For a non-symmetric A with uneven blocks (one empty when P > 2), CALLS calls of one layer's
view exact, with r = 2 (local and delayed backward), r = 3 and with drop; each call t
multiplies fresh X_t (and Y_t for the transpose). Rank 0 writes A, the layout, the gathered
results, every rank's bytes sent per call and its ghost rows' bins, per mode.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import scipy.sparse as sp
import torch
from mpi4py import MPI

import spmmgnn
from spmmgnn.algorithms.delayed import DelayedRemote

comm = MPI.COMM_WORLD
P = comm.size
F, CALLS = 3, 8


MODES = (("exact", 0, False, "local"), ("stale2", 2, False, "local"),
         ("stale2_delayed", 2, False, "delayed"), ("stale3", 3, False, "local"),
         ("drop", 0, True, "local"))


def host(a) -> np.ndarray:
    return a.cpu().numpy() if isinstance(a, torch.Tensor) else a


def main() -> None:
    device = sys.argv[2] if len(sys.argv) > 2 and sys.argv[2] != "none" else None
    codec = sys.argv[3] if len(sys.argv) > 3 else None
    grid = spmmgnn.ProcessGrid(comm, device=device)
    sizes = np.random.default_rng(P).integers(4, 12, P)
    if P > 2:
        sizes[1] = 0  # an empty block
    n = int(sizes.sum())
    A = sp.random(n, n, density=0.3, random_state=7, format="csr")
    out = dict(A=A.toarray().tolist(), modes={})
    for mode, R, drop, backward in MODES:
        op = spmmgnn.DistSpMM.from_scipy(A if comm.rank == 0 else None, grid,
                                         algorithm="sparse1d", partition=sizes.tolist(),
                                         **({"codec": codec} if codec else {}))
        delayed = DelayedRemote(op, R, drop, backward, seed=3)
        view = delayed.views(2)[1]
        zs, ts, sent, sent_t = [], [], [], []
        for t in range(CALLS):
            X = np.random.default_rng(100 + t).standard_normal((n, F))
            Y = np.random.default_rng(200 + t).standard_normal((n, F))
            if device is not None:
                X, Y = torch.from_numpy(X).to(grid.device), torch.from_numpy(Y).to(grid.device)
            x = op.scatter_rows(X if comm.rank == 0 else None)
            before = op.stats.bytes_sent
            z = view.matmul(x)
            sent.append(comm.gather(op.stats.bytes_sent - before))
            zs.append(host(op.gather_rows(z)))
            y = op.scatter_rows(Y if comm.rank == 0 else None, side="output")
            before = op.stats.bytes_sent
            w = view.matmul_t(y)
            sent_t.append(comm.gather(op.stats.bytes_sent - before))
            ts.append(host(op.gather_rows(w, side="input")))
        delayed.close()
        share = delayed.remote_share()
        bins = None
        if delayed.bins is not None:
            bins = dict(ids=op.product.plan.ghost_ids.tolist(),
                        bins=delayed.bins.bin_of.tolist())
        bins = comm.gather(bins)
        if comm.rank == 0:
            out["offsets"] = op.row_offsets.tolist()
            out["modes"][mode] = dict(z=[z.tolist() for z in zs], t=[t.tolist() for t in ts],
                                      sent=sent, sent_t=sent_t, bins=bins, r=R,
                                      remote_share=share)
    if comm.rank == 0:
        with open(sys.argv[1], "w") as fh:
            json.dump(out, fh)


if __name__ == "__main__":
    main()
