"""Rows moved per SpMM by pure post-aggregation (``sparse1d``: the distinct cut columns per
pair), pure pre-aggregation (the distinct cut rows per pair: partial sums) and the hybrid
minimum vertex cover (``prepost1d``), on the same partition (like SuperGCN's Table 4).

    python -m bench.prepost -k 2 4 8 --method metis-vol

Counted from the partition alone (no MPI): for each ordered pair (receiver p, sender q) the
cut non-zeros of block row p in block column q. ``tests/algorithms/test_prepost.py`` checks that the
measured bytes of ``prepost1d`` equal the cover sizes, and ``bench.spmm`` measures both.
"""

from __future__ import annotations

import argparse

import numpy as np
import scipy.sparse as sp

from bench import RESULTS
from spmmgnn.benchmark.harness import machine
from spmmgnn.benchmark.tables import md_table, publish
from spmmgnn.benchmark.volumes import Layout
from spmmgnn.data.generators import rmat, sbm
from spmmgnn.partitioners import partition


def pair_rows(A: sp.csr_array, offsets: np.ndarray) -> dict[str, int]:
    """Total rows over all ordered pairs for post, pre and hybrid (cover) aggregation, from the
    volume model of ``spmmgnn model``: post = distinct cut columns per pair, pre = distinct
    cut rows per pair (the distinct columns of Aᵀ), hybrid = the per-pair minimum cover."""
    layout = Layout(sp.csr_array(A), np.asarray(offsets, dtype=np.int64))
    transposed = Layout(sp.csr_array(A.T), layout.offsets)
    return dict(post=int(layout.pair_volume().sum()), pre=int(transposed.pair_volume().sum()),
                hybrid=int(layout.cover_volume().sum()))


def render(data: dict) -> str:
    lines = [f"Rows sent per SpMM, all ordered pairs summed ({data['args']['method']} "
             "partition); bytes are rows x f x itemsize for every plan.", ""]
    lines += md_table(["graph", "k", "post (sparse1d)", "pre", "hybrid (prepost1d)",
                       "hybrid / post"],
                      [[r["graph"], r["k"], f"{r['post']:,}", f"{r['pre']:,}", f"{r['hybrid']:,}",
                        f"{r['hybrid'] / max(r['post'], 1):.3f}"] for r in data["rows"]],
                      "lrrrrr")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-k", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--method", default="metis-vol")
    ap.add_argument("--rmat-scale", type=int, default=15)
    ap.add_argument("--sbm-n", type=int, default=32768)
    ap.add_argument("--out", default=str(RESULTS / "prepost"))
    args = ap.parse_args()
    graphs = {f"R-MAT s{args.rmat_scale} e16 (symmetrized)":
              rmat(args.rmat_scale, 16, seed=0, symmetric=True, permute=True),
              f"R-MAT s{args.rmat_scale} e16 (directed)":
              rmat(args.rmat_scale, 16, seed=0, symmetric=False, permute=True),
              f"block model n={args.sbm_n}": sbm(args.sbm_n, 64, avg_degree=16.0, mixing=0.2,
                                                 seed=0)}
    rows = []
    for name, A in graphs.items():
        A = sp.csr_array(A)
        for k in args.k:
            part = partition(A, k, method=args.method, seed=0)
            Ap = sp.csr_array(A[part.perm][:, part.perm])
            r = dict(graph=name, k=k, n=A.shape[0], nnz=int(A.nnz), **pair_rows(Ap, part.offsets))
            rows.append(r)
            print(f"{name:38s} k={k:2d} post {r['post']:9,d} pre {r['pre']:9,d} "
                  f"hybrid {r['hybrid']:9,d} ({r['hybrid'] / max(r['post'], 1):.3f} x post)",
                  flush=True)
    publish(args.out, dict(machine=machine(), args=vars(args), rows=rows), render)


if __name__ == "__main__":
    main()
