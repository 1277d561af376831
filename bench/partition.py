"""Partitioner comparison: total volume, max send, send imbalance, max receive, load imbalance
and time of every method on an R-MAT power-law graph, a 3-D 7-point grid and a stochastic
block model graph, or on the real graphs of ``bench/real_graphs.py``, at several k. Writes
JSON and a Markdown report with a summary table (``bench/results/``).

    python bench/partition.py                                 # the synthetic comparison
    python bench/partition.py --graphs real small --k 16 64 --out bench/results/partition_real
    python bench/partition.py --graphs rmat --k 64 --rmat-scale 14 --methods metis-vol default
    python bench/partition.py --graphs grid --append          # add rows to an earlier run

``--append`` keeps the rows of the existing JSON and only runs the missing
(graph, k, method) combinations, so a long comparison can be run in pieces. ``--time-limit S``
runs each partition in a child process and records a row that did not finish in S seconds as
such (the issue's "kahypar where it finishes in 10 minutes"). ``metis`` (the
better of the two METIS objectives) is left out by default: it repeats those two rows.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import real_graphs  # noqa: E402
from bench.common import RESULTS, machine, write_json  # noqa: E402
from spmmgnn.atomic import write_text_atomic  # noqa: E402
from spmmgnn.data.generators import grid3d, rmat, sbm  # noqa: E402
from spmmgnn.partitioners import BASE_METHODS, DEFAULT_METHOD, METHODS, partition  # noqa: E402
from spmmgnn.partitioners.api import (  # noqa: E402
    LARGE_GRAPH,
    METIS_CANDIDATE,
    MTKAHYPAR_CANDIDATE,
)
from spmmgnn.partitioners.bounds import hub_bound  # noqa: E402
from spmmgnn.partitioners.model import ColumnNet, load_cap, row_loads  # noqa: E402

SYNTHETIC = ["rmat", "grid", "sbm"]

COLUMNS = [("method", "method", "{}"), ("total_volume", "total vol", "{:,}"),
           ("max_send", "max send", "{:,}"), ("send_imbalance", "send imb", "{:.1%}"),
           ("max_recv", "max recv", "{:,}"), ("load_imbalance", "load imb", "{:.1%}"),
           ("seconds", "seconds", "{:.1f}")]
HUB_COLUMN = ("hub_bound", "hub LB", "{:,}")


def make_graph(name: str, args) -> tuple[str, object]:
    if name == "rmat":
        return (f"rmat-s{args.rmat_scale}-e16",
                rmat(args.rmat_scale, 16, seed=args.seed, symmetric=True, permute=True))
    if name == "grid":
        return f"grid{args.grid}^3", grid3d(args.grid)
    if name in real_graphs.GRAPHS:
        return name, real_graphs.load(name, Path(args.deb_root))
    if name == "sbm":
        return (f"sbm-n{args.sbm_n}-c{args.sbm_communities}",
                sbm(args.sbm_n, args.sbm_communities, avg_degree=16.0, mixing=0.2,
                    seed=args.seed))
    raise SystemExit(f"unknown graph {name}")


def _bound(A, k: int, args, cn: ColumnNet | None = None) -> int:
    loads = row_loads(A)
    return hub_bound(cn or ColumnNet.from_matrix(A), loads, k, load_cap(loads, k, args.epsilon))


def _row(label: str, A, k: int, method: str, args, bound: int) -> dict:
    """One row of the table: ``method``'s partition of A into k parts and its metrics."""
    P = partition(A, k, method=method, epsilon=args.epsilon, seed=args.seed,
                  threads=args.threads)
    return dict(graph=label, n=A.shape[0], nnz=int(A.nnz), method=method, resolved=P.method,
                seconds=P.seconds, hub_bound=bound, candidates=P.candidates,
                **P.metrics.as_dict())


def _child(queue, gname: str, k: int, method: str, args) -> None:
    label, A = make_graph(gname, args)
    queue.put(_row(label, A, k, method, args, _bound(A, k, args)))


def _row_within(gname: str, k: int, method: str, args, label: str, A) -> dict:
    """``_row`` in a spawned child killed after ``args.time_limit`` seconds; a row
    without volumes (``timed_out``) when it did not finish."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(queue, gname, k, method, args))
    t0 = time.perf_counter()
    proc.start()
    try:
        return queue.get(timeout=args.time_limit)
    except Exception:  # queue.Empty: the limit passed (or the child died)
        return dict(graph=label, n=A.shape[0], nnz=int(A.nnz), k=k, method=method,
                    resolved=method, timed_out=True, seconds=time.perf_counter() - t0)
    finally:
        proc.kill()
        proc.join()


def checks(rows: list[dict]) -> list[str]:
    """The issue's targets for the default method, per (graph, k), relative to the others."""
    out = []
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if not r.get("timed_out"):
            groups.setdefault((r["graph"], r["k"]), []).append(r)
    for (graph, k), rs in groups.items():
        by = {r["method"]: r for r in rs}
        d = by.get(DEFAULT_METHOD)
        if d is None:
            continue
        others = [r for r in rs if r["method"] != DEFAULT_METHOD]
        low = min(r["total_volume"] for r in rs)
        low2 = min((by[m]["total_volume"] for m in ("metis-vol", "mtkahypar") if m in by),
                   default=low)
        parts = [f"total/lowest {d['total_volume'] / low:.3f}",
                 f"total/min(METIS-vol, Mt-KaHyPar) {d['total_volume'] / low2:.3f}",
                 f"send imb {d['send_imbalance']:.1%}", f"load imb {d['load_imbalance']:.1%}"]
        if "hub_bound" in d:
            parts.append(f"max send {d['max_send']:,} (hub LB {d['hub_bound']:,})")
        if "metis-vol" in by:
            m = by["metis-vol"]
            parts += [f"max send/METIS-vol {d['max_send'] / m['max_send']:.2f}",
                      f"time/METIS-vol {d['seconds'] / max(m['seconds'], 1e-9):.1f}"]
        if others:
            best = min(r["max_send"] for r in others)
            parts.append(f"max send/best other {d['max_send'] / best:.2f}")
        out.append(f"- {graph}, k={k}: " + ", ".join(parts))
    return out


def summary(rows: list[dict]) -> list[str]:
    """One line per (graph, k) with default: the issue's targets next to METIS-vol's and the
    seconds of default, METIS-vol, Mt-KaHyPar and KaHyPar ('-' not run, '>' did not finish)."""
    groups: dict[tuple, dict] = {}
    for r in rows:
        groups.setdefault((r["graph"], r["k"]), {})[r["method"]] = r
    out = ["| graph | n | k | default = | total / min(METIS-vol, Mt-KaHyPar) | max send "
           "(× METIS-vol) | hub LB | send imb (METIS-vol) | load imb | seconds: default "
           "(METIS-vol, Mt-KaHyPar, KaHyPar) |", "|---|---:|---:|---|---:|---|---:|---:|---:|---|"]
    for (graph, k), by in groups.items():
        d, m = by.get(DEFAULT_METHOD), by.get("metis-vol")
        if d is None or m is None:
            continue
        low = min(by[x]["total_volume"] for x in ("metis-vol", "mtkahypar")
                  if x in by and not by[x].get("timed_out"))
        secs = {x: "-" if x not in by else (f">{by[x]['seconds']:.0f}" if by[x].get("timed_out")
                                             else f"{by[x]['seconds']:.1f}")
                for x in ("metis-vol", "mtkahypar", "kahypar")}
        out.append(
            f"| {graph} | {d['n']:,} | {k} | {d.get('resolved', '?')} | "
            f"{d['total_volume'] / low:.3f} | {d['max_send']:,} "
            f"({d['max_send'] / m['max_send']:.2f}) | {d.get('hub_bound', 0):,} | "
            f"{d['send_imbalance']:.1%} ({m['send_imbalance']:.1%}) | "
            f"{d['load_imbalance']:.1%} | {d['seconds']:.1f} ({secs['metis-vol']}, "
            f"{secs['mtkahypar']}, {secs['kahypar']}) |")
    return out


def markdown(rows: list[dict], meta: dict) -> str:
    lines = ["# Partitioner comparison", "",
             f"`default`: the best of {METIS_CANDIDATE} and (below {LARGE_GRAPH:,} vertices) "
             f"{MTKAHYPAR_CANDIDATE} by max send + total / k; "
             f"epsilon {meta['epsilon']}, seed {meta['seed']}, threads {meta['threads']}, "
             f"{meta['machine']['cores']} cores.",
             "Volumes are rows of X per SpMM (docs/metrics.md); imbalance = max/avg - 1. "
             "Graphs without a size in their name are real graphs of bench/real_graphs.py "
             "(Debian packages). \"hub LB\" is the lower bound on the max send of "
             "spmmgnn/partitioners/bounds.py.", "", "## Summary", ""] + summary(rows) + [""]
    keys = []
    for r in rows:
        if (r["graph"], r["k"]) not in keys:
            keys.append((r["graph"], r["k"]))
    order = {m: i for i, m in enumerate(METHODS + (DEFAULT_METHOD,))}
    for graph, k in keys:
        rs = sorted((r for r in rows if r["graph"] == graph and r["k"] == k),
                    key=lambda r: order.get(r["method"], len(order)))
        lb = next((f", hub lower bound on max send {r['hub_bound']:,}" for r in rs
                   if "hub_bound" in r), "")
        lines += [f"## {graph} (n={rs[0]['n']:,}, nnz={rs[0]['nnz']:,}), k={k}{lb}", "",
                  "| " + " | ".join(h for _, h, _ in COLUMNS) + " |",
                  "|" + "|".join("---" if c == "method" else "---:" for c, _, _ in COLUMNS)
                  + "|"]
        for r in rs:
            if r.get("timed_out"):
                lines.append(f"| {r['method']} | did not finish in {r['seconds']:.0f} s |"
                             + " |" * (len(COLUMNS) - 2))
                continue
            cells = [f.format(r[c]) for c, _, f in COLUMNS]
            if r["method"] == DEFAULT_METHOD:
                cells[0] = f"**default** ({r.get('resolved', '?')})"
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
        for r in rs:
            if r["method"] == DEFAULT_METHOD and r.get("candidates"):
                lines += ["default's candidates: " + "; ".join(
                    f"{c['method']} total {c['total_volume']:,}, max send {c['max_send']:,}, "
                    f"{c['seconds']:.1f} s" for c in r["candidates"]), ""]
    lines += ["## Targets of the default method", ""] + checks(rows) + [""]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graphs", nargs="+", default=SYNTHETIC,
                    choices=SYNTHETIC + list(real_graphs.GRAPHS) + ["real", "small"],
                    help="'real' / 'small' = bench/real_graphs.py's BENCH_SET / SMALL_SET")
    ap.add_argument("--deb-root", default=str(real_graphs.DEB_ROOT),
                    help="where Debian packages are unpacked and real graphs cached")
    ap.add_argument("--k", nargs="+", type=int, default=[4, 16, 64])
    ap.add_argument("--methods", nargs="+",
                    default=[m for m in BASE_METHODS if m != "metis"] + ["default"],
                    help=f"any of {', '.join(METHODS)}, or 'default'")
    ap.add_argument("--rmat-scale", type=int, default=16)
    ap.add_argument("--grid", type=int, default=64, help="grid side (n = side^3)")
    ap.add_argument("--sbm-n", type=int, default=1 << 16)
    ap.add_argument("--sbm-communities", type=int, default=100)
    ap.add_argument("--epsilon", type=float, default=0.03)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None,
                    help="threads for Mt-KaHyPar (default: all cores)")
    ap.add_argument("--out", default=str(RESULTS / "partition"),
                    help="output path without extension (.json and .md are written)")
    ap.add_argument("--append", action="store_true", help="keep and extend an earlier run")
    ap.add_argument("--time-limit", type=float, default=None,
                    help="seconds per partition (each then runs in a child process)")
    ap.add_argument("--render", action="store_true",
                    help="only rewrite the Markdown from the existing JSON")
    args = ap.parse_args(argv)
    if args.render:
        data = json.loads(Path(args.out).with_suffix(".json").read_text())
        write_text_atomic(Path(args.out).with_suffix(".md"), markdown(data["rows"], data["meta"]))
        return 0
    methods = [DEFAULT_METHOD if m == "default" else m for m in args.methods]
    out = Path(args.out)
    meta = dict(epsilon=args.epsilon, seed=args.seed, threads=args.threads or machine()["cores"],
                machine=machine(),
                default_method=f"best of {METIS_CANDIDATE} and (below {LARGE_GRAPH} "
                               f"vertices) {MTKAHYPAR_CANDIDATE}")
    rows: list[dict] = []
    if args.append and out.with_suffix(".json").exists():
        rows = json.loads(out.with_suffix(".json").read_text())["rows"]
    done = {(r["graph"], r["k"], r["method"]) for r in rows}
    # load the numba caches and METIS once, so the first timed partition does not pay for it
    partition(grid3d(8), 2, method="metis-vol+maxsend", threads=args.threads)
    sets = dict(real=real_graphs.BENCH_SET, small=real_graphs.SMALL_SET)
    graphs = [g for name in args.graphs for g in sets.get(name, [name])]
    for gname in graphs:
        t0 = time.perf_counter()
        label, A = make_graph(gname, args)
        print(f"{label}: n={A.shape[0]:,} nnz={A.nnz:,} ({time.perf_counter() - t0:.1f} s)",
              flush=True)
        cn = None
        for k in args.k:
            bound = None
            for method in methods:
                if (label, k, method) in done:
                    continue
                if args.time_limit:
                    row = _row_within(gname, k, method, args, label, A)
                else:
                    if bound is None:
                        cn = cn or ColumnNet.from_matrix(A)
                        bound = _bound(A, k, args, cn)
                    row = _row(label, A, k, method, args, bound)
                rows.append(row)
                if row.get("timed_out"):
                    print(f"  k={k:3d} {method:20s} did not finish in {row['seconds']:.0f} s",
                          flush=True)
                else:
                    print(f"  k={k:3d} {method:20s} total {row['total_volume']:>9,} max send "
                          f"{row['max_send']:>8,} ({row['send_imbalance']:6.1%}) load imb "
                          f"{row['load_imbalance']:5.1%}  {row['seconds']:7.1f} s", flush=True)
                write_json(out.with_suffix(".json"), dict(meta=meta, rows=rows))
                write_text_atomic(out.with_suffix(".md"), markdown(rows, meta))
    write_json(out.with_suffix(".json"), dict(meta=meta, rows=rows))
    write_text_atomic(out.with_suffix(".md"), markdown(rows, meta))
    print("\n".join(checks(rows)))
    print(f"wrote {out.with_suffix('.json')} and {out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
