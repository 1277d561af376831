"""Effect of ``reorder="rcm"`` (RCM inside each block row) on the gather-bound local product:
time of ``op.matmul`` at P = 1 (the whole product is the diagonal block) with and without it,
on a randomly numbered 3-D grid (a mesh), R-MAT, and any graph files given.

    python -m bench.reorder --threads 2 -f 16 64 128 [--graph FILE ...]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from bench import RESULTS
from spmmgnn import DistSpMM, ProcessGrid, set_threads
from spmmgnn.benchmark.harness import best_time, machine
from spmmgnn.benchmark.tables import md_table, publish
from spmmgnn.data.generators import grid3d, rmat
from spmmgnn.data.loaders import load_graph


def graphs(args) -> dict[str, sp.csr_array]:
    g = sp.csr_array(grid3d(args.grid))
    perm = np.random.default_rng(0).permutation(g.shape[0])
    out = {f"grid {args.grid}^3, random numbering": sp.csr_array(g[perm][:, perm]),
           f"R-MAT s{args.scale} e16": sp.csr_array(rmat(args.scale, 16, seed=0))}
    for f in args.graph:
        out[Path(f).stem] = sp.csr_array(load_graph(f).adj)
    return out


def render(data: dict) -> str:
    lines = [f"`op.matmul` at P = 1, float32, {data['args']['threads']} threads, best of 7; "
             "ratio = time with reorder='rcm' / time without.", ""]
    lines += md_table(["graph", "n", "nnz", "f", "ms", "ms (rcm)", "ratio"],
                      [[r["graph"], f"{r['n']:,}", f"{r['nnz']:,}", r["f"], f"{r['ms']:.2f}",
                        f"{r['ms_rcm']:.2f}", f"{r['ratio']:.2f}"] for r in data["rows"]],
                      "lrrrrrr")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-f", type=int, nargs="+", default=[16, 64, 128])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--grid", type=int, default=48)
    ap.add_argument("--scale", type=int, default=16)
    ap.add_argument("--graph", nargs="*", default=[])
    ap.add_argument("--out", default=str(RESULTS / "reorder"))
    args = ap.parse_args()
    set_threads(args.threads)
    grid = ProcessGrid(MPI.COMM_SELF)
    rows = []
    for name, A in graphs(args).items():
        ops = {r: DistSpMM.from_scipy(A, grid, reorder=r, validate=False)
               for r in (None, "rcm")}
        for f in args.f:
            x = np.random.default_rng(f).standard_normal((A.shape[0], f)).astype(np.float32)
            t = {str(r): best_time(lambda op=op, x=x: op.matmul(x), repeat=7)["min"]
                 for r, op in ops.items()}
            rows.append(dict(graph=name, n=A.shape[0], nnz=int(A.nnz), f=f,
                             ms=t["None"] * 1e3, ms_rcm=t["rcm"] * 1e3,
                             ratio=t["rcm"] / t["None"]))
            print(f"{name:32s} f={f:3d} {t['None'] * 1e3:8.2f} ms  rcm {t['rcm'] * 1e3:8.2f} ms"
                  f"  ({t['rcm'] / t['None']:.2f}x)", flush=True)
    publish(args.out, dict(machine=machine(), args=vars(args), rows=rows), render)


if __name__ == "__main__":
    main()
