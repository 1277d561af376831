"""Partitioner comparison: total volume, max send, send imbalance, max receive, load imbalance
and time of every method on an R-MAT power-law graph, a 3-D 7-point grid and a stochastic
block model graph, or on the real graphs of ``bench/real_graphs.py``, at several k. Writes
JSON and a Markdown report with a summary table (``bench/results/``).

    python -m bench.partition                                 # the synthetic comparison
    python -m bench.partition --graphs real small --k 16 64 --out bench/results/partition_real
    python -m bench.partition --graphs rmat --k 64 --rmat-scale 14 --methods metis-vol default
    python -m bench.partition --graphs grid --append          # add rows to an earlier run

``--append`` keeps the rows of the existing JSON and only runs the missing
(graph, k, method) combinations, so a long comparison can be run in pieces. ``--time-limit S``
runs each partition in a child process and records a row that did not finish in S seconds as
such (the issue's "kahypar where it finishes in 10 minutes"). ``metis`` (the
better of the two METIS objectives) is left out by default: it repeats those two rows.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import RESULTS, ROOT, real_graphs
from spmmgnn.benchmark.harness import library_from, machine, python_module, run, write_json
from spmmgnn.benchmark.tables import md_table, publish, regenerate
from spmmgnn.data.generators import grid3d, rmat, sbm
from spmmgnn.partitioners import BASE_METHODS, DEFAULT_METHOD, METHODS, QUALITY_METHOD
from spmmgnn.partitioners.api import METIS_CANDIDATE, MTKAHYPAR_CANDIDATE, QUALITY_TOTAL
from spmmgnn.partitioners.bounds import hub_bound
from spmmgnn.partitioners.budget import default_budget
from spmmgnn.partitioners.model import ColumnNet, load_cap, row_loads

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


def _load() -> float:
    """The 1-minute load average when a row starts (others share the machine)."""
    return round(os.getloadavg()[0], 1)


def _spec(gname: str, k: int, method: str, args) -> dict:
    """What ``bench.partition_child`` needs for one row; ``method@name`` runs ``method``
    with the code of ``--baseline name=DIR``."""
    method, _, ref = method.partition("@")
    code = dict(b.split("=", 1) for b in args.baseline)[ref] if ref else str(ROOT)
    return dict(code=code, graph=gname, k=k, method=method, epsilon=args.epsilon,
                seed=args.seed, threads=args.threads, deb_root=args.deb_root,
                rmat_scale=args.rmat_scale, grid=args.grid, sbm_n=args.sbm_n,
                sbm_communities=args.sbm_communities)


def child(spec: dict, timeout: float | None, check: bool = True):
    """``bench.partition_child`` on one row's ``spec`` in a fresh process, with the
    ``spmmgnn`` of ``spec["code"]`` (this checkout's or a baseline's)."""
    cmd = python_module("bench.partition_child", json.dumps(spec))
    if Path(spec["code"]).resolve() == ROOT:
        return run(cmd, timeout=timeout, cwd=ROOT, check=check)
    with tempfile.TemporaryDirectory() as folder:
        return run(cmd, env=library_from(spec["code"], folder, ROOT), timeout=timeout,
                   cwd=folder, check=check)


def _row(gname: str, k: int, method: str, args, label: str, A, bound: int) -> dict:
    """One row of the table: ``method``'s partition of A into k parts, its metrics, seconds
    and peak memory, measured in a fresh process (``bench.partition_child``); a row
    without volumes (``timed_out``) when it did not finish in ``--time-limit`` seconds."""
    t0 = time.perf_counter()
    head = dict(graph=label, k=k, method=method, hub_bound=bound, load=_load())
    try:
        out = child(_spec(gname, k, method, args), args.time_limit, check=False)
    except subprocess.TimeoutExpired:
        return dict(head, n=A.shape[0], nnz=int(A.nnz), resolved=method, timed_out=True,
                    seconds=time.perf_counter() - t0)
    if out.returncode != 0:
        raise SystemExit(f"{label} k={k} {method} failed:\n{out.stderr[-3000:]}")
    return dict(head, **out.last_json())


MESHES = {"elephant", "bunny", "armadillo", "hueeber"}
PRESETS = (DEFAULT_METHOD, QUALITY_METHOD)


def _score(r: dict) -> float:
    return r["max_send"] + r["total_volume"] / r["k"]


def _groups(rows: list[dict]) -> dict[tuple, dict]:
    groups: dict[tuple, dict] = {}
    for r in rows:
        if not r.get("timed_out"):
            groups.setdefault((r["graph"], r["k"]), {})[r["method"]] = r
    return groups


def _hub_note(r: dict) -> str:
    """The hub lower bound and, where it alone puts the send imbalance above 8 %, a note."""
    avg = r["total_volume"] / r["k"]
    bound = r.get("hub_bound", 0)
    return f"{bound:,}" + (" (bound > 8 % imb)" if avg and bound / avg - 1 > 0.08 else "")


def checks(rows: list[dict]) -> list[str]:
    """The issue's targets per preset and (graph, k): ``default`` score <= 0.85x the better
    of METIS-vol and Mt-KaHyPar (meshes 0.95x), send imbalance <= 15 % (not on meshes), time
    <= max(3x METIS-vol's, 2 s) (issue 39); ``quality`` total <= 1.02x the lower of the two, max
    send <= 0.8x METIS-vol's (meshes 0.95x), send imbalance <= 8 % where the hub bound
    allows. Each target is followed by ok / MISSED."""
    out = []
    for (graph, k), by in _groups(rows).items():
        base = [by[m] for m in ("metis-vol", "mtkahypar") if m in by]
        if "metis-vol" not in by:
            continue
        m, mesh = by["metis-vol"], graph in MESHES
        best_score = min(_score(r) for r in base)
        low_total = min(r["total_volume"] for r in base)
        hub_allows = m.get("hub_bound", 0) <= 1.08 * m["total_volume"] / k
        for preset in PRESETS:
            d = by.get(preset)
            if d is None:
                continue
            items = []
            if preset == DEFAULT_METHOD:
                items.append(("score / better of METIS-vol, Mt-KaHyPar",
                              _score(d) / best_score, 0.95 if mesh else 0.85, "{:.3f}"))
                if not mesh and hub_allows:
                    items.append(("send imb", d["send_imbalance"], 0.15, "{:.1%}"))
                items.append(("time / max(3x METIS-vol, 2 s)",
                              d["seconds"] / default_budget(m["seconds"]), 1.0, "{:.2f}"))
            else:
                items.append(("total / lower of METIS-vol, Mt-KaHyPar",
                              d["total_volume"] / low_total, 1.02, "{:.3f}"))
                items.append(("max send / METIS-vol", d["max_send"] / m["max_send"],
                              0.95 if mesh else 0.8, "{:.2f}"))
                if hub_allows:
                    items.append(("send imb", d["send_imbalance"], 0.08, "{:.1%}"))
            text = ", ".join(f"{name} {fmt.format(v)} (<= {fmt.format(t)}: "
                             f"{'ok' if v <= t + 1e-12 else 'MISSED'})"
                             for name, v, t, fmt in items)
            out.append(f"- {graph}, k={k}, {preset} ({d.get('resolved', '?')}): {text}")
    return out


def summary(rows: list[dict]) -> list[str]:
    """One line per (graph, k, preset): its score against the better of METIS-vol and
    Mt-KaHyPar, total against their lower, max send against METIS-vol's, the hub bound, send
    and load imbalance, and seconds (METIS-vol, Mt-KaHyPar, KaHyPar: '-' not run, '>' did
    not finish)."""
    out = []
    every = {}
    for r in rows:
        every.setdefault((r["graph"], r["k"]), {})[r["method"]] = r
    for (graph, k), by in _groups(rows).items():
        m = by.get("metis-vol")
        base = [by[x] for x in ("metis-vol", "mtkahypar") if x in by]
        if m is None:
            continue
        secs = {x: "-" if x not in every[graph, k] else (
            f">{every[graph, k][x]['seconds']:.0f}" if every[graph, k][x].get("timed_out")
            else f"{every[graph, k][x]['seconds']:.1f}") for x in ("metis-vol", "mtkahypar",
                                                                   "kahypar")}
        for preset in PRESETS:
            d = by.get(preset)
            if d is None:
                continue
            out.append([
                graph, f"{d['n']:,}", k, f"{preset}: {d.get('resolved', '?')}",
                f"{_score(d) / min(_score(r) for r in base):.3f}",
                f"{d['total_volume'] / min(r['total_volume'] for r in base):.3f}",
                f"{d['max_send']:,} ({d['max_send'] / m['max_send']:.2f})", _hub_note(d),
                f"{d['send_imbalance']:.1%} ({m['send_imbalance']:.1%})",
                f"{d['load_imbalance']:.1%}", f"{d['seconds']:.1f} ({secs['metis-vol']}, "
                f"{secs['mtkahypar']}, {secs['kahypar']})"])
    return md_table(["graph", "n", "k", "preset =", "score / best base",
                     "total / min(METIS-vol, Mt-KaHyPar)", "max send (× METIS-vol)", "hub LB",
                     "send imb (METIS-vol)", "load imb",
                     "seconds (METIS-vol, Mt-KaHyPar, KaHyPar)"], out, "lrrlrrlrrrl")


def _secs(r: dict | None) -> str:
    if r is None:
        return "-"
    return f">{r['seconds']:.0f}" if r.get("timed_out") else f"{r['seconds']:.1f}"


def time_rule(rows: list[dict]) -> list[str]:
    """One line per (graph, k): ``default``'s seconds against its rule, max(3x METIS-vol's
    seconds, 2 s) (both rows measured one after the other in the same run; and against the
    rule from its own first base's seconds, which is what it enforces), its score
    against the earlier default's (``default@main``, the same run, where measured) and the
    better base; KaMinPar's seconds and volumes against METIS-vol's; each method's peak
    memory."""
    out = []
    for (graph, k), by in _groups(rows).items():
        m, d = by.get("metis-vol"), by.get(DEFAULT_METHOD)
        if m is None or d is None:
            continue
        rule = default_budget(m["seconds"])
        old = by.get(f"{DEFAULT_METHOD}@main")
        base = [by[x] for x in ("metis-vol", "mtkahypar") if x in by]
        km = by.get("kaminpar")
        kcell = "-" if km is None else (
            f"{km['seconds']:.2f}, {km['total_volume'] / m['total_volume']:.2f}, "
            f"{km['max_send'] / m['max_send']:.2f}")
        mem = ", ".join(f"{by[x]['peak_rss_mib']:.0f}" if x in by and "peak_rss_mib" in by[x]
                        else "-" for x in ("metis-vol", "kaminpar", DEFAULT_METHOD))
        ocell = "-" if old is None else f"{_score(d) / _score(old):.3f} ({old['seconds']:.1f})"
        first = next((c for c in d.get("candidates", []) if "skipped" not in c), None)
        own = "-" if first is None else f"{d['seconds'] / default_budget(first['seconds']):.2f}"
        out.append([
            graph, f"{d['n']:,}", k, d.get("resolved", "?"),
            f"{d['seconds']:.2f} ({m['seconds']:.2f}; {rule:.1f})",
            f"{d['seconds'] / rule:.2f}{'' if d['seconds'] <= rule else ' MISSED'}", own, ocell,
            f"{_score(d) / min(_score(r) for r in base):.3f}", kcell,
            f"{mem} ({d.get('graph_rss_mib', 0):.0f})"])
    return md_table(["graph", "n", "k", "default =", "seconds: default (METIS-vol; rule)",
                     "default / rule", "default / its own rule",
                     "score / default@main (its seconds)", "score / better base",
                     "KaMinPar: seconds, total, max send (x METIS-vol)",
                     "peak MiB: METIS-vol, KaMinPar, default (graph)"], out, "lrrlrrrrrll")


LARGE_COMMAND = "python -m bench.large_graph --scale S --edge-factor 7 --k 64 256 1024"


def large_table(large: dict | None) -> list[str]:
    """The large-graph section from ``bench.large_graph``'s JSON (none if it has not run)."""
    if not large:
        return []
    out = []
    for r in large["rows"]:
        size = f" (n={r['n']:,}, nnz={r['nnz']:,})" if "nnz" in r else ""
        head = [f"{r['graph']}{size}", r["k"], r["method"]]
        if r["method"] == "write":
            ok = "ok" if r.get("read_ok") else "FAILED"
            out.append([*head, f"{r['write_seconds']:.0f} (read {r.get('read_seconds', 0):.0f})",
                        f"{r['write_peak_rss_mib']:.0f} (read "
                        f"{r.get('read_peak_rss_mib', 0):.0f})",
                        f"{r['write_method']}, read back per block row: {ok}", "", "", "",
                        f"{r['load']:.1f}"])
        elif "total_volume" not in r:
            why = (r.get("note") or "did not finish") if r.get("timed_out") else (
                f"failed: {r.get('failed')}")
            out.append([*head, f"{r['seconds']:.0f}", "", why, "", "", "", f"{r['load']:.1f}"])
        else:
            out.append([*head, f"{r['seconds']:.1f}", f"{r['peak_rss_mib']:.0f}",
                        f"{r['total_volume']:,}", f"{r['max_send']:,}",
                        f"{r['send_imbalance']:.1%}", f"{r['load_imbalance']:.1%}",
                        f"{r['load']:.1f}"])
    return ["## Large graphs", "",
            f"`{large.get('command', LARGE_COMMAND)}` (R-MAT, "
            "symmetric, built in O(nnz) memory; each method in a fresh process; peak MiB is "
            "the process's, the graph's memory-mapped arrays included; 'write' is `spmmgnn "
            "datasets convert --parts k` with the method named, then every block row read "
            "back on its own). Load is the 1-minute load average when the row ended.", "",
            *md_table(["graph", "k", "method", "seconds", "peak MiB", "total vol", "max send",
                       "send imb", "load imb", "load"], out, "lrlrrrrrrr"), ""]


def load_result(stem) -> dict:
    """A comparison's stored JSON with the large-graph rows beside it
    (``partition_large.json`` in the same folder), as ``render`` takes them."""
    from spmmgnn.benchmark.tables import load

    data = load(stem)
    large = Path(stem).with_name("partition_large.json")
    if large.exists():
        data["large"] = json.loads(large.read_text())
    return data


def render(data: dict) -> str:
    """The comparison's report: how it ran, ``default``'s time rule, the large graphs, the
    summary, one table per graph and k, and the presets' targets."""
    rows, meta = data["rows"], data["meta"]
    lines = ["# Partitioner comparison", "",
             "`default` (fast): within max(3x METIS-vol's time, 2 s), the best by max send "
             "+ total / k of METIS-vol, KaMinPar and Mt-KaHyPar's fast preset as the time "
             "rule lets them run, refined by the multilevel refinement while the time lasts "
             "(spmmgnn/partitioners/budget.py); `quality`: the best of "
             "both on every graph with the multilevel refinement at up to 12 levels, within "
             "20x METIS-vol's time (at least 10 s), among the candidates whose total is within "
             f"{QUALITY_TOTAL}x the lower of METIS-vol's and Mt-KaHyPar's (its "
             "refinements stop there); "
             f"epsilon {meta['epsilon']}, seed {meta['seed']}, threads {meta['threads']}, "
             f"{meta['machine']['cores']} cores.",
             "Volumes are rows of X per SpMM (docs/metrics.md); imbalance = max/avg - 1. "
             "Graphs without a size in their name are real graphs of bench/real_graphs.py "
             "(Debian packages). \"hub LB\" is the lower bound on the max send of "
             "spmmgnn/partitioners/bounds.py."] + (
                 ["", f"How the rows were made: {meta['rerun']}"] if meta.get("rerun") else []
             ) + ["", "## default's time rule and KaMinPar", "",
                  "Every row ran in a fresh process (bench/partition_child.py) after a warm-up "
                  "on a tiny graph (numba caches, METIS); peak MiB is the process's peak "
                  "resident memory (graph and libraries included: the graph's own figure in "
                  "parentheses). The load average of the machine is in the JSON per row.", ""
                  ] + time_rule(rows) + [""] + large_table(data.get("large")) + [
                 "## Summary", ""] + (
                 summary(rows) + [""])
    keys = []
    for r in rows:
        if (r["graph"], r["k"]) not in keys:
            keys.append((r["graph"], r["k"]))
    order = {m: i for i, m in enumerate(METHODS + PRESETS)}
    for graph, k in keys:
        rs = sorted((r for r in rows if r["graph"] == graph and r["k"] == k),
                    key=lambda r: order.get(r["method"], len(order)))
        lb = next((f", hub lower bound on max send {r['hub_bound']:,}" for r in rs
                   if "hub_bound" in r), "")
        lines += [f"## {graph} (n={rs[0]['n']:,}, nnz={rs[0]['nnz']:,}), k={k}{lb}", ""]
        table = []
        for r in rs:
            if r.get("timed_out"):
                table.append([r["method"], f"did not finish in {r['seconds']:.0f} s",
                              *[""] * (len(COLUMNS) - 2)])
                continue
            cells = [f.format(r[c]) for c, _, f in COLUMNS]
            if r["method"] in PRESETS:
                cells[0] = f"**{r['method']}** ({r.get('resolved', '?')})"
            table.append(cells)
        lines += md_table([h for _, h, _ in COLUMNS], table,
                          "".join("l" if c == "method" else "r" for c, _, _ in COLUMNS))
        lines.append("")
        for r in rs:
            if r["method"] in PRESETS and r.get("candidates"):
                lines += [f"{r['method']}'s candidates: " + "; ".join(
                    f"{c['method']} skipped ({c['skipped']})" if "total_volume" not in c else
                    f"{c['method']}{' (' + c['refinement'] + ')' if c.get('refinement') else ''}"
                    f" total {c['total_volume']:,}, max send {c['max_send']:,}, "
                    f"{c['seconds']:.2f} s" for c in r["candidates"]), ""]
    lines += ["## Targets of the presets", ""] + checks(rows) + [""]
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
                    default=[m for m in BASE_METHODS if m != "metis"] + list(PRESETS),
                    help=f"any of {', '.join(METHODS)}, 'default' or 'quality' (method@NAME: "
                         "with the code of --baseline NAME=DIR)")
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
                    help="seconds per partition (its process is killed then)")
    ap.add_argument("--baseline", nargs="*", default=[], metavar="NAME=DIR",
                    help="other code to measure: method@NAME runs with the spmmgnn under DIR "
                         "(e.g. main's unpacked by git archive), for paired A/B rows")
    ap.add_argument("--render", action="store_true",
                    help="only rewrite the Markdown from the existing JSON")
    ap.add_argument("--merge", metavar="JSON",
                    help="put the rows of another run into --out's JSON (replacing the same "
                         "graph, k and method), then render")
    ap.add_argument("--note", default="", help="with --merge: how the merged rows were made")
    args = ap.parse_args(argv)
    if args.merge:
        data = json.loads(Path(args.out).with_suffix(".json").read_text())
        new = json.loads(Path(args.merge).read_text())
        key = {(r["graph"], r["k"], r["method"]): r for r in new["rows"]}
        rows = [key.pop((r["graph"], r["k"], r["method"]), r) for r in data["rows"]]
        data["rows"] = rows + list(key.values())
        if args.note:
            data["meta"]["rerun"] = f"{data['meta'].get('rerun', '')}; {args.note}"
        write_json(Path(args.out).with_suffix(".json"), data)
        args.render = True
    if args.render:
        regenerate(args.out, lambda _: render(load_result(args.out)))
        return 0
    methods = list(args.methods)
    out = Path(args.out)
    meta = dict(epsilon=args.epsilon, seed=args.seed, threads=args.threads or machine()["cores"],
                machine=machine(),
                default_method="METIS-vol, then KaMinPar, Mt-KaHyPar (fast preset) and the "
                               "multilevel refinements within max(3x METIS-vol, 2 s)",
                quality_method=f"best of {METIS_CANDIDATE} and {MTKAHYPAR_CANDIDATE}, "
                               "12 levels, budget 20x METIS-vol (>= 10 s), total within "
                               f"{QUALITY_TOTAL}x the lower base's")
    rows: list[dict] = []
    if args.append and out.with_suffix(".json").exists():
        earlier = json.loads(out.with_suffix(".json").read_text())
        rows, meta = earlier["rows"], {**earlier["meta"], **meta}
    done = {(r["graph"], r["k"], r["method"]) for r in rows}
    sets = dict(real=real_graphs.BENCH_SET, small=real_graphs.SMALL_SET)
    graphs = [g for name in args.graphs for g in sets.get(name, [name])]
    for gname in graphs:
        t0 = time.perf_counter()
        label, A = make_graph(gname, args)
        print(f"{label}: n={A.shape[0]:,} nnz={A.nnz:,} ({time.perf_counter() - t0:.1f} s; "
              f"load {_load()})", flush=True)
        cn = None
        for k in args.k:
            bound = None
            for method in methods:
                if (label, k, method) in done:
                    continue
                if bound is None:
                    cn = cn or ColumnNet.from_matrix(A)
                    bound = _bound(A, k, args, cn)
                row = _row(gname, k, method, args, label, A, bound)
                rows.append(row)
                if row.get("timed_out"):
                    print(f"  k={k:3d} {method:20s} did not finish in {row['seconds']:.0f} s",
                          flush=True)
                else:
                    print(f"  k={k:3d} {method:20s} total {row['total_volume']:>9,} max send "
                          f"{row['max_send']:>8,} ({row['send_imbalance']:6.1%}) load imb "
                          f"{row['load_imbalance']:5.1%}  {row['seconds']:7.1f} s "
                          f"{row.get('peak_rss_mib', 0):6.0f} MiB", flush=True)
                publish(out, dict(meta=meta, rows=rows), lambda _: render(load_result(out)))
    publish(out, dict(meta=meta, rows=rows), lambda _: render(load_result(out)))
    print("\n".join(checks(rows)))
    print(f"wrote {out.with_suffix('.json')} and {out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
