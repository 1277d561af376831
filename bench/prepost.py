"""Rows moved per SpMM by pure post-aggregation (``sparse1d``: the distinct cut columns per
pair), pure pre-aggregation (the distinct cut rows per pair: partial sums) and the hybrid
minimum vertex cover (``prepost1d``), on the same partition (like SuperGCN's Table 4).

    python bench/prepost.py -k 2 4 8 --method metis-vol

Counted from the partition alone (no MPI): for each ordered pair (receiver p, sender q) the
cut non-zeros of block row p in block column q. ``tests/test_prepost.py`` checks that the
measured bytes of ``prepost1d`` equal the cover sizes, and ``bench/spmm.py`` measures both.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import RESULTS, machine, write_json  # noqa: E402
from spmmgnn.benchmark.volumes import Layout  # noqa: E402
from spmmgnn.data.generators import rmat, sbm  # noqa: E402
from spmmgnn.partitioners import partition  # noqa: E402
from spmmgnn.runtime.atomic import write_text_atomic  # noqa: E402


def pair_rows(A: sp.csr_array, offsets: np.ndarray) -> dict[str, int]:
    """Total rows over all ordered pairs for post, pre and hybrid (cover) aggregation, from the
    volume model of ``spmmgnn model``: post = distinct cut columns per pair, pre = distinct
    cut rows per pair (the distinct columns of Aᵀ), hybrid = the per-pair minimum cover."""
    layout = Layout(sp.csr_array(A), np.asarray(offsets, dtype=np.int64))
    transposed = Layout(sp.csr_array(A.T), layout.offsets)
    return dict(post=int(layout.pair_volume().sum()), pre=int(transposed.pair_volume().sum()),
                hybrid=int(layout.cover_volume().sum()))


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
    write_json(Path(args.out).with_suffix(".json"), dict(machine=machine(), args=vars(args),
                                                         rows=rows))
    lines = [f"Rows sent per SpMM, all ordered pairs summed ({args.method} partition); bytes are "
             "rows x f x itemsize for every plan.", "",
             "| graph | k | post (sparse1d) | pre | hybrid (prepost1d) | hybrid / post |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['graph']} | {r['k']} | {r['post']:,} | {r['pre']:,} | "
                     f"{r['hybrid']:,} | {r['hybrid'] / max(r['post'], 1):.3f} |")
    write_text_atomic(Path(args.out).with_suffix(".md"), "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
