"""Where the remaining send imbalance comes from: the max-send refinement's trade-off between
the total volume and the maximum send volume on the real graphs, and what the bottleneck
part's send volume consists of.

For each real graph, k and base partition (METIS-vol; below ``LARGE_GRAPH`` vertices also
Mt-KaHyPar), ``refine_max_send`` runs with the options ``default`` uses and a growing
``volume_slack`` (how much total volume phase 2 may add to trade for a lower max send):
the send imbalance reached at each slack shows what the 10 % of ``default`` leaves on the
table. Next to it, two things that bound the max send from below:

* ``hub LB``: ``bounds.hub_bound``, rows that hub columns force on any balanced partition;
* ``top-10 share``: the fraction of the bottleneck part's send volume carried by its 10
  columns of highest ``lambda - 1`` (hub rows needed by many parts). A large share means the
  bottleneck is a few hubs (moving them only moves the problem); a small one means it is a
  broad cut surface, which only more total volume (a larger slack) can shrink.

    python -m bench.send_balance                        # BENCH_SET, k = 16 64
    python -m bench.send_balance --graphs wordnet --k 64 --slack 0.02 0.1
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from bench import RESULTS, real_graphs
from spmmgnn.benchmark.harness import machine
from spmmgnn.benchmark.tables import md_table, publish
from spmmgnn.partitioners.api import LARGE_GRAPH, LARGE_GRAPH_REFINEMENT
from spmmgnn.partitioners.bounds import hub_bound
from spmmgnn.partitioners.hypergraph import mtkahypar_parts
from spmmgnn.partitioners.maxsend import rebalance, refine_max_send
from spmmgnn.partitioners.metis import metis_parts
from spmmgnn.partitioners.metrics import cut_pairs
from spmmgnn.partitioners.model import ColumnNet, load_cap, row_loads

SLACKS = (0.0, 0.02, 0.05, 0.1, 0.25)


def bottleneck(A, parts: np.ndarray, k: int) -> dict:
    """Send volume per part, and the bottleneck part's composition: column c is sent to
    lambda(c) - 1 parts, one per (c, receiving part) pair of ``metrics.cut_pairs``."""
    col, _ = cut_pairs(A, parts)
    lam1 = np.bincount(col, minlength=A.shape[0])
    send = np.bincount(parts, weights=lam1, minlength=k).astype(np.int64)
    p = int(send.argmax())
    mine = np.sort(lam1[parts == p])[::-1]
    return dict(total=int(col.size), max_send=int(send[p]),
                send_imbalance=float(send[p] / max(send.mean(), 1e-12) - 1),
                boundary=int((mine > 0).sum()),
                top10_share=float(mine[:10].sum() / max(send[p], 1)))


def base_parts(base: str, A, k: int, loads, eps: float, seed: int, threads: int, cn):
    if base == "metis-vol":
        return metis_parts(A, k, loads, eps, seed, objective="vol")
    return mtkahypar_parts(A, k, loads, eps, seed, threads=threads, cn=cn)


def render(data: dict) -> str:
    rows, meta = data["rows"], data["meta"]
    lines = ["# Send balance: what the max-send refinement trades", "",
             f"epsilon {meta['epsilon']}, seed {meta['seed']}, {meta['machine']['cores']} cores. "
             "`slack` = volume_slack of refine_max_send (default uses 0.1, keeping the lowest "
             "max send + total / k; '-' = the base "
             "partition unrefined). Volumes in rows of X per SpMM. `top-10 share`: part of the "
             "bottleneck's send carried by its 10 columns of highest lambda - 1.", ""]
    lines += md_table(["graph", "k", "base", "slack", "total vol", "total / base", "max send",
                       "send imb", "hub LB", "top-10 share", "boundary cols", "seconds"],
                      [[r["graph"], r["k"], r["base"],
                        "-" if r["slack"] is None else f"{r['slack']:.2f}", f"{r['total']:,}",
                        f"{r['total_ratio']:.3f}", f"{r['max_send']:,}",
                        f"{r['send_imbalance']:.1%}", f"{r['hub_bound']:,}",
                        f"{r['top10_share']:.1%}", f"{r['boundary']:,}", f"{r['seconds']:.1f}"]
                       for r in rows], "lrlrrrrrrrrr")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graphs", nargs="+", default=list(real_graphs.BENCH_SET),
                    choices=list(real_graphs.GRAPHS))
    ap.add_argument("--deb-root", default=str(real_graphs.DEB_ROOT))
    ap.add_argument("--k", nargs="+", type=int, default=[16, 64])
    ap.add_argument("--slack", nargs="+", type=float, default=list(SLACKS))
    ap.add_argument("--epsilon", type=float, default=0.03)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(RESULTS / "send_balance_real"))
    args = ap.parse_args(argv)
    meta = dict(epsilon=args.epsilon, seed=args.seed, machine=machine())
    out, rows = Path(args.out), []
    for name in args.graphs:
        A = real_graphs.load(name, Path(args.deb_root))
        n, loads, cn = A.shape[0], row_loads(A), ColumnNet.from_matrix(A)
        options = dict(LARGE_GRAPH_REFINEMENT) if n >= LARGE_GRAPH else {}
        bases = ["metis-vol"] + (["mtkahypar"] if n < LARGE_GRAPH else [])
        for k in args.k:
            cap = load_cap(loads, k, args.epsilon)
            lb = hub_bound(cn, loads, k, cap)
            for base in bases:
                t0 = time.perf_counter()
                p0 = rebalance(cn, loads, base_parts(base, A, k, loads, args.epsilon, args.seed,
                                                     args.threads, cn), k, cap)[0]
                t_base = time.perf_counter() - t0
                ref = bottleneck(A, p0, k)
                for slack in [None, *args.slack]:
                    t0 = time.perf_counter()
                    p = p0 if slack is None else refine_max_send(
                        cn, loads, p0, k, cap, seed=args.seed, volume_slack=slack,
                        **options)[0]
                    secs = t_base if slack is None else time.perf_counter() - t0
                    row = dict(graph=name, n=n, k=k, base=base, slack=slack, hub_bound=lb,
                               seconds=secs, **bottleneck(A, p, k))
                    row["total_ratio"] = row["total"] / ref["total"]
                    rows.append(row)
                    print(f"{name} k={k} {base} slack={slack}: total {row['total']:,} "
                          f"max send {row['max_send']:,} ({row['send_imbalance']:.1%}) "
                          f"top10 {row['top10_share']:.1%} {secs:.1f} s", flush=True)
                    publish(out, dict(meta=meta, rows=rows), render)
    return 0


if __name__ == "__main__":
    sys.exit(main())
