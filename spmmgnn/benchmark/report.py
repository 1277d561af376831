"""``spmmgnn report``: plots and a Markdown summary of a results file (JSON lines).

One PNG per view of the ICPP'24 evaluation, each written even when the results hold no data
for it (then it is one line saying so), so a report always has the same files; a view has
one panel per mode (and width), every panel with data (``plots`` keeps the rules):

==================== =========================================================================
``time_vs_P.png``    time per SpMM / per epoch vs P, one line per algorithm and c or grid (Fig. 3)
``breakdown.png``    stacked local / exchange / all-reduce / codec / dense / other (Fig. 4)
``partitioners.png`` total and maximum bytes sent per partitioner (Fig. 6)
``replication.png``  time and bytes vs the replication factor c of the 1.5D algorithms (Fig. 7)
``bytes_per_rank.png`` bytes sent by every rank, with max / average (Table 2)
``codecs.png``       bytes on the wire and accuracy per codec
==================== =========================================================================
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np

from ..runtime.errors import SpmmgnnError
from .plots import (
    HATCHES,
    MARKERS,
    PALETTE,
    draw_lines,
    legend_outside,
    note_figure,
    pyplot,
    save_png,
    series_styles,
)
from .runs import PHASES

PLOTS = ("time_vs_P", "breakdown", "partitioners", "replication", "bytes_per_rank", "codecs")
COLORS = dict(local="tab:blue", exchange="tab:red", allreduce="tab:green", codec="tab:purple",
              dense="tab:orange", other="tab:gray")
MB = 1e6
PANEL_W, LEGEND_W = 5.4, 2.6   # inches: a panel, and the legend beside it


def runs_of(records: list[dict]) -> list[dict]:
    """Successful sweep runs (not network records, not failed runs)."""
    return [r for r in records if r.get("mode") in ("spmm", "train") and "error" not in r
            and "seconds" in r]


def sent(r: dict) -> np.ndarray:
    return np.asarray(r.get("per_rank", {}).get("bytes_sent", [0]), dtype=float)


def inter(r: dict) -> np.ndarray:
    """Bytes each rank sent to other nodes (records before the tiers: all of them)."""
    per = r.get("per_rank", {})
    return np.asarray(per.get("bytes_sent_inter", per.get("bytes_sent", [0])), dtype=float)


def grid_key(r: dict) -> str:
    """``c=2`` for the 1D/1.5D runs, the shape (``2x2``) for the 2D/3D ones; the exchange,
    the ranks per node and a training run's block layout (``bench --grid-layout`` /
    ``--plexus-blocks``) when not the defaults."""
    key = r.get("grid") or f"c={r['c']}"
    if r.get("exchange", "flat") != "flat":
        key += f" {r['exchange']}"
    if r.get("grid_layout"):
        key += " grid-layout"
    if r.get("plexus_blocks"):
        key += f" plexus-blocks={r['plexus_blocks']}"
    if r.get("ranks_per_node"):
        key += f" K={r['ranks_per_node']}"
    return key


def label(r: dict) -> str:
    return f"{r['algorithm']} {grid_key(r)}"


def _unit(mode: str) -> str:
    return "ms per SpMM" if mode == "spmm" else "ms per epoch"


def _baseline(runs: list[dict]) -> list[dict]:
    """The plain runs: no codec and the first partitioner seen (for the views about
    algorithms, so lines compare like with like)."""
    plain = [r for r in runs if r["codec"] == "none"]
    if not plain:
        return []
    first = plain[0]["partitioner"]
    return [r for r in plain if r["partitioner"] == first]


def _panels(plt, n: int, height: float, legend: bool = True, **kw):
    """``n`` panels side by side (two a row), each with room for its legend on the right."""
    cols = min(2, n)
    rows = -(-n // cols)
    width = PANEL_W + (LEGEND_W if legend else 0.0)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows),
                             squeeze=False, **kw)
    flat = list(axes.ravel())
    for ax in flat[n:]:
        fig.delaxes(ax)
    return fig, flat[:n]


def _bar_styles(keys) -> dict:
    """A bar series' look: its family's colour and its variant's hatch."""
    return {k: dict(color=s["color"], hatch=HATCHES[MARKERS.index(s["marker"]) % len(HATCHES)])
            for k, s in series_styles(keys).items()}


def time_vs_p_figure(plt, runs):
    """One panel per mode and width: a line per algorithm and grid over P; with a single P,
    where a line would be one point, horizontal bars instead."""
    base = _baseline(runs)
    panels = sorted({(r["mode"], r["f"]) for r in base})
    if not panels:
        return note_figure(plt, "time vs P: no runs without a codec in these results")
    tall = max(sum((r["mode"], r["f"]) == p for r in base) for p in panels)
    fig, axes = _panels(plt, len(panels), max(3.6, 1.2 + 0.3 * tall))
    for ax, (mode, f) in zip(axes, panels, strict=True):
        sel = [r for r in base if (r["mode"], r["f"]) == (mode, f)]
        series = defaultdict(list)
        for r in sel:
            series[(r["algorithm"], grid_key(r))].append((r["P"], r["seconds"] * 1e3))
        Ps = sorted({r["P"] for r in sel})
        if len(Ps) == 1:
            _bars_one_p(ax, series, Ps[0], mode, f)
            continue
        pts = {k: ([p for p, _ in sorted(v)], [t for _, t in sorted(v)])
               for k, v in sorted(series.items())}
        draw_lines(ax, pts, series_styles(pts))
        ax.set_xscale("log", base=2)
        ax.set_xticks(Ps, [str(P) for P in Ps])
        ax.set(xlabel="P (MPI ranks)", ylabel=_unit(mode), title=f"{mode}, f={f}: time vs P")
        legend_outside(ax)
    return fig


def _bars_one_p(ax, series: dict, P: int, mode: str, f: int) -> None:
    keys = sorted(series)
    style = _bar_styles(keys)
    y = np.arange(len(keys))
    for i, k in enumerate(keys):
        ax.barh(y[i], min(t for _, t in series[k]), color=style[k]["color"],
                hatch=style[k]["hatch"], edgecolor="white", linewidth=0)
    ax.set_yticks(y, [" ".join(k) for k in keys])
    ax.invert_yaxis()
    ax.set(xlabel=_unit(mode), title=f"{mode}, f={f}: time at P = {P}")


def breakdown_figure(plt, runs):
    """Horizontal stacked bars, one per run, a panel per mode: the names stay readable and
    the bars inside the frame however many runs there are. Phases that are zero in every
    run of a panel are left out of it."""
    base = _baseline(runs)
    modes = sorted({r["mode"] for r in base})
    if not modes:
        return note_figure(plt, "breakdown: no runs without a codec in these results")
    count = max(sum(r["mode"] == m for r in base) for m in modes)
    fig, axes = _panels(plt, len(modes), 1.4 + 0.3 * count)
    for ax, mode in zip(axes, modes, strict=True):
        sel = sorted((r for r in base if r["mode"] == mode),
                     key=lambda r: (r["P"], r["f"], r["algorithm"], grid_key(r)))
        y = np.arange(len(sel))
        left = np.zeros(len(sel))
        for ph in PHASES:
            v = np.array([r["breakdown"].get(ph, 0.0) * 1e3 for r in sel])
            if not np.any(v > 0):
                continue
            ax.barh(y, v, left=left, color=COLORS[ph], label=ph)
            left += v
        ax.set_yticks(y, [f"{label(r)} P={r['P']} f={r['f']}" for r in sel])
        ax.invert_yaxis()
        ax.set_xlim(0, max(left.max(), 1e-9) * 1.05)
        ax.set(xlabel=f"{_unit(mode)} (slowest rank per phase)", title=f"{mode}: breakdown")
        legend_outside(ax)
    return fig


def _group_bars(ax, groups: list[str], series: dict[str, list[float]], xlabel: str,
                legend: bool = True) -> None:
    """Horizontal grouped bars: one row per group, named on the y axis in a readable size
    however long the names are; one bar per series in each row, each series its colour."""
    height = 0.8 / max(1, len(series))
    y = np.arange(len(groups))
    for i, (name, vals) in enumerate(series.items()):
        ax.barh(y + i * height - 0.4 + height / 2, vals, height, label=name,
                color=PALETTE[i % len(PALETTE)])
    ax.set_yticks(y, groups)
    ax.set_ylim(len(groups) - 0.5, -0.5)  # the first group on top
    ax.set_xlabel(xlabel)
    if legend:
        legend_outside(ax)


def _two_panels(plt, groups: int):
    """Two side-by-side panels sharing their rows (the names once, on the left)."""
    return plt.subplots(1, 2, figsize=(13, 1.6 + 0.32 * max(groups, 3)), sharey=True)


def partitioners_figure(plt, runs):
    sel = [r for r in runs if r["codec"] == "none" and r["mode"] == "spmm"] or \
        [r for r in runs if r["codec"] == "none"]
    keys = sorted({(r["algorithm"], grid_key(r), r["P"], r["f"]) for r in sel
                   if r["P"] // r["c"] > 1})  # a single block row exchanges nothing
    if not keys:
        return note_figure(plt, "partitioners: no runs with an exchange in these results")
    fig, axes = _two_panels(plt, len(keys))
    parts = sorted({r["partitioner"] for r in sel})
    groups = [f"{a} {g} P={P} f={f}" for a, g, P, f in keys]
    for ax, (what, fn) in zip(axes, (("total", np.sum), ("max per rank", np.max)),
                              strict=True):
        series = {}
        for p in parts:
            vals = []
            for key in keys:
                m = [fn(sent(r)) / MB for r in sel if r["partitioner"] == p and
                     (r["algorithm"], grid_key(r), r["P"], r["f"]) == key]
                vals.append(m[0] if m else 0.0)
            series[p] = vals
        _group_bars(ax, groups, series, f"{what} bytes sent (MB per call)",
                    legend=ax is axes[1])
        ax.set_title(f"partitioners: {what} send volume")
    return fig


def replication_figure(plt, runs):
    sel = [r for r in _baseline(runs) if r["algorithm"].endswith("15d")]
    if not sel:
        return note_figure(plt, "replication: no 1.5D runs in these results")
    fig, axes = _panels(plt, 2, 4.0)
    series = defaultdict(list)
    for r in sel:
        series[(r["algorithm"], f"{r['mode']} P={r['P']} f={r['f']}")].append(r)
    style = series_styles(series)
    cs = sorted({r["c"] for r in sel})
    for ax, value in zip(axes, (lambda r: r["seconds"] * 1e3, lambda r: (
            sent(r).max() + max(r["per_rank"].get("allreduce_bytes", [0]))) / MB),
                         strict=True):
        pts = {}
        for key, rs in sorted(series.items()):
            rs = sorted(rs, key=lambda r: r["c"])
            pts[key] = ([r["c"] for r in rs], [value(r) for r in rs])
        draw_lines(ax, pts, style)
        ax.set_xticks(cs, [str(c) for c in cs])
        legend_outside(ax)
    axes[0].set(xlabel="replication c", ylabel="ms per SpMM / epoch", title="1.5D: time vs c")
    axes[1].set(xlabel="replication c", ylabel="max bytes per rank (MB, exchange + "
                "all-reduce)", title="1.5D: bytes vs c")
    return fig


def bytes_per_rank_figure(plt, runs):
    base = [r for r in _baseline(runs) if r["mode"] == "spmm"] or _baseline(runs)
    P = max((r["P"] for r in base), default=0)
    sel = sorted((r for r in base if r["P"] == P),
                 key=lambda r: (r["f"], r["algorithm"], grid_key(r)))
    if not sel:
        return note_figure(plt, "bytes per rank: no runs without a codec in these results")
    f = sel[0]["f"]
    sel = [r for r in sel if r["f"] == f]
    fig, (ax,) = _panels(plt, 1, 3.8)
    ranks = np.arange(P)
    w = 0.8 / len(sel)
    style = _bar_styles([(r["algorithm"], grid_key(r)) for r in sel])
    for i, r in enumerate(sel):
        s = sent(r) / MB
        st = style[(r["algorithm"], grid_key(r))]
        ax.bar(ranks + i * w - 0.4 + w / 2, s, w, color=st["color"], hatch=st["hatch"],
               edgecolor="white", linewidth=0,
               label=f"{label(r)} (max/avg {s.max() / max(s.mean(), 1e-30):.2f})")
    ax.set(xlabel="rank", ylabel="bytes sent per call (MB)",
           title=f"bytes per rank, P={P}, f={f}")
    ax.set_xticks(ranks)
    legend_outside(ax)
    return fig


def codecs_figure(plt, runs):
    codec_keys = {(r["mode"], r["algorithm"], grid_key(r), r["P"], r["f"], r["partitioner"])
                  for r in runs if r["codec"] != "none"}
    sel = [r for r in runs if (r["mode"], r["algorithm"], grid_key(r), r["P"], r["f"],
                               r["partitioner"]) in codec_keys]
    if not sel:
        return note_figure(plt, "codecs: no codec runs in these results")
    fig, axes = _two_panels(plt, len(codec_keys))
    keys = sorted(codec_keys)
    groups = [f"{m} {a} {g} P={P} f={f} {p}" for m, a, g, P, f, p in keys]
    codecs = sorted({r["codec"] for r in sel}, key=lambda c: (c != "none", c))

    def pick(k, codec, fn):
        m = [fn(r) for r in sel if (r["mode"], r["algorithm"], grid_key(r), r["P"], r["f"],
                                    r["partitioner"]) == k and r["codec"] == codec]
        return m[0] if m else 0.0

    _group_bars(axes[0], groups, {c: [pick(k, c, lambda r: sent(r).sum() / MB)
                                      for k in keys] for c in codecs},
                "total bytes sent (MB per call / epoch)", legend=False)
    axes[0].set_title("codecs: bytes on the wire")
    _group_bars(axes[1], groups, {c: [pick(k, c, _accuracy) for k in keys] for c in codecs},
                "test accuracy (train) / 1 - max rel. error (SpMM)")
    axes[1].set_title("codecs: accuracy")
    return fig


FIGURES = dict(time_vs_P=time_vs_p_figure, breakdown=breakdown_figure,
               partitioners=partitioners_figure, replication=replication_figure,
               bytes_per_rank=bytes_per_rank_figure, codecs=codecs_figure)


def _accuracy(r: dict) -> float:
    if r.get("accuracy") is not None:
        return float(r["accuracy"])
    return float(1.0 - min(1.0, r.get("max_rel_error") or 0.0))


def _convert(r: dict) -> str:
    """The largest rank's layout-conversion bytes (``bytes_sent_by_phase["convert"]``, in
    ``max MB sent``), or "-" for records without them."""
    per = r.get("per_rank", {}).get("bytes_sent_convert")
    return "-" if per is None else f"{max(per) / MB:.3f}"


def _table(runs: list[dict]) -> list[str]:
    lines = ["| mode | algorithm | P | grid | partitioner | codec | f | ms | local | exchange "
             "| all-reduce | codec | dense | other | max MB sent | avg MB sent | max/avg "
             "| inter-node MB (all ranks) | of which convert, max MB "
             "| accuracy (final / best-val) |",
             "|" + " --- |" * 20]
    for r in sorted(runs, key=lambda r: (r["mode"], r["P"], r["f"], r["algorithm"],
                                         grid_key(r), r["partitioner"], r["codec"])):
        s = sent(r) / MB
        b = r["breakdown"]
        acc = r.get("accuracy")
        err = r.get("max_rel_error")
        best = r.get("best_accuracy")
        acc = (f"{acc:.3f}" + (f" / {best:.3f}" if best is not None else "")
               if acc is not None else f"err {err:.1e}" if err is not None else "-")
        ratio = f"{s.max() / s.mean():.2f}" if s.mean() > 0 else "-"
        lines.append(
            f"| {r['mode']} | {r['algorithm']} | {r['P']} | {grid_key(r)} | "
            f"{r['partitioner']} | "
            f"{r['codec']} | {r['f']} | {r['seconds'] * 1e3:.2f} | "
            + " | ".join(f"{b.get(p, 0) * 1e3:.2f}" for p in PHASES)
            + f" | {s.max():.3f} | {s.mean():.3f} | {ratio} | {inter(r).sum() / MB:.3f} "
            f"| {_convert(r)} | {acc} |")
    return lines


def summary(records: list[dict], by_graph: dict[str, list[dict]],
            folders: dict[str, str]) -> str:
    lines = ["# Benchmark report", ""]
    nets = [r for r in records if r.get("kind") == "network"]
    if nets:
        n = nets[-1]
        host = n.get("machine", {}).get("host", "?")
        lines += [f"Network (P={n['P']}, {host}): ping-pong alpha = "
                  f"{n['alpha'] * 1e6:.2f} us, beta = {n['beta'] * 1e9:.4f} ns/B "
                  f"({1e-9 / max(n['beta'], 1e-30):.2f} GB/s); all-to-all alpha = "
                  f"{n['all_to_all']['alpha'] * 1e6:.2f} us, beta = "
                  f"{n['all_to_all']['beta'] * 1e9:.4f} ns/B per pair.", ""]
    lines += ["Times are the slowest rank's per phase (ms per SpMM or per epoch); bytes sent "
              "per call (SpMM) or per epoch (training), inter-node: to ranks on other nodes "
              "(grid `node`: the node-aware exchange, `K=`: ranks per node), of which "
              "convert: the dense rows' layout conversions (oblivious2d/3d), counted apart; "
              "accuracy is a "
              "training run's test "
              "accuracy at its final epoch / at its best-validation epoch, or the SpMM's max "
              "relative error against scipy.", ""]
    for graph, runs in by_graph.items():
        r0 = runs[0]
        lines += [f"## `{graph}` (n = {r0.get('n')}, nnz = {r0.get('nnz')})", ""]
        lines += _table(runs) + [""]
        lines += [f"![{p}]({folders[graph]}/{p}.png)" for p in PLOTS] + [""]
    failed = [r for r in records if "error" in r]
    if failed:
        lines += [f"{len(failed)} run(s) failed:", ""]
        lines += [f"- {r.get('graph')} {r.get('mode')} {r.get('algorithm')} "
                  f"{r.get('grid') or 'c=' + str(r.get('c'))} {r.get('partitioner')} "
                  f"{r.get('codec')}: {r['error']}" for r in failed]
    return "\n".join(lines) + "\n"


def _slug(graph: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in graph)


def _by_graph(records: list[dict]) -> dict[str, list[dict]]:
    """The newest record of each successful run, per graph (the report's folders)."""
    from .records import latest

    by_graph: dict[str, list[dict]] = defaultdict(list)
    for r in runs_of(latest(records)):
        by_graph[r["graph"]].append(r)
    if not by_graph:
        by_graph["(no successful runs)"] = []
    return by_graph


def report_figures(records: list[dict]):
    """Every figure of the report: ``(folder, name, figure)``, one per graph and view of
    ``PLOTS``, in the report's order (the caller saves and closes them)."""
    plt = pyplot()
    for graph, runs in _by_graph(records).items():
        for name in PLOTS:
            yield _slug(graph), name, FIGURES[name](plt, runs)


def write_report(records: list[dict], out: str | Path) -> list[Path]:
    """Write ``summary.md`` into ``out`` and every plot of ``PLOTS`` into a sub-folder per
    graph, named after it (the same layout for one graph or many); returns the paths. A run
    recorded more than once (failed, then retried) counts with its newest record."""
    from ..runtime.atomic import write_text_atomic
    from .records import latest

    records = latest(records)
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise SpmmgnnError(f"report -o {out}: it is a file, not a folder; the report is a "
                           "folder (summary.md and a sub-folder of plots per graph)")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpmmgnnError(f"cannot create the report folder {out}: "
                           f"{exc.strerror or exc}") from None
    plt = pyplot()
    paths = []
    for folder, name, fig in report_figures(records):
        (out / folder).mkdir(exist_ok=True)
        path = out / folder / f"{name}.png"
        save_png(fig, path)
        plt.close(fig)
        paths.append(path)
    md = out / "summary.md"
    write_text_atomic(md, report_summary(records))
    return [*paths, md]


def report_summary(records: list[dict]) -> str:
    """The report's ``summary.md`` (the newest record of each run)."""
    from .records import latest

    records = latest(records)
    by_graph = _by_graph(records)
    if not any(by_graph.values()):
        return "# Benchmark report\n\nNo successful runs.\n"
    return summary(records, by_graph, {g: _slug(g) for g in by_graph})
