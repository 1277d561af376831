"""``spmmgnn report``: plots and a Markdown summary of a results file (JSON lines).

One PNG per view of the ICPP'24 evaluation, each written even when the results hold no data
for it (then it says so), so a report always has the same files:

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
from .runs import PHASES

PLOTS = ("time_vs_P", "breakdown", "partitioners", "replication", "bytes_per_rank", "codecs")
COLORS = dict(local="tab:blue", exchange="tab:red", allreduce="tab:green", codec="tab:purple",
              dense="tab:orange", other="tab:gray")
MB = 1e6
# one colour per algorithm family (tab10, then Dark2: 18 before one repeats), and within a
# family one marker and line style per variant (c, grid, width), so no two series look alike
PALETTE = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown",
           "tab:pink", "tab:gray", "tab:olive", "tab:cyan", "#1b9e77", "#d95f02", "#7570b3",
           "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#000000")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
LINESTYLES = ("-", "--", ":", "-.")
HATCHES = ("", "///", "...", "xxx", "\\\\\\", "ooo", "+++", "---")  # bars: a variant's pattern


def series_styles(keys) -> dict:
    """``{(family, variant): dict(color=, marker=, linestyle=)}``: the family (an algorithm)
    decides the colour, always the same one for the same algorithm; the variant the marker
    and the line style. Distinct keys never share colour, marker and line style."""
    from ..algorithms import ALGORITHMS

    known = sorted(ALGORITHMS)
    families = sorted({f for f, _ in keys}, key=lambda f: (f not in known, f))
    index = {f: known.index(f) if f in known else len(known) + i
             for i, f in enumerate(f for f in families if f not in known)}
    index.update({f: known.index(f) for f in families if f in known})
    out = {}
    for f in families:
        variants = sorted({v for g, v in keys if g == f})
        round_ = index[f] // len(PALETTE)  # beyond the palette: shift the markers
        for j, v in enumerate(variants):
            m = j + 3 * round_
            out[(f, v)] = dict(color=PALETTE[index[f] % len(PALETTE)],
                               marker=MARKERS[m % len(MARKERS)],
                               linestyle=LINESTYLES[(m // len(MARKERS)) % len(LINESTYLES)])
    return out


def legend_outside(ax, **kw) -> None:
    """The legend right of the axes, never over the data (``save_png`` keeps it in)."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0,
                  frameon=False, **kw)


def pyplot():
    """matplotlib.pyplot with the file-only Agg backend (works without a display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_png(fig, path) -> None:
    """Write a figure atomically (``atomic.atomic_path``: never half a PNG, never a device
    replaced)."""
    from ..runtime.atomic import atomic_path

    with atomic_path(path, "plot") as tmp:
        fig.savefig(tmp, dpi=80, format="png", bbox_inches="tight")


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


def _empty(ax, what: str) -> None:
    ax.text(0.5, 0.5, f"no {what} in these results", ha="center", va="center",
            transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def _baseline(runs: list[dict]) -> list[dict]:
    """The plain runs: no codec and the first partitioner seen (for the views about
    algorithms, so lines compare like with like)."""
    plain = [r for r in runs if r["codec"] == "none"]
    if not plain:
        return []
    first = plain[0]["partitioner"]
    return [r for r in plain if r["partitioner"] == first]


def _modes(runs: list[dict]) -> list[str]:
    return sorted({r["mode"] for r in runs}) or ["spmm"]


def plot_time_vs_p(plt, runs, path: Path) -> None:
    """One line per algorithm and grid (and width) over P; with a single P, where a line
    would be one point, horizontal bars instead."""
    base = _baseline(runs)
    modes = _modes(base)
    fig, axes = plt.subplots(1, len(modes), figsize=(7 * len(modes), 4.5), squeeze=False)
    for ax, mode in zip(axes[0], modes, strict=True):
        sel = [r for r in base if r["mode"] == mode]
        series = defaultdict(list)
        for r in sel:
            series[(r["algorithm"], f"{grid_key(r)} f={r['f']}")].append(
                (r["P"], r["seconds"] * 1e3))
        if not series:
            _empty(ax, f"{mode} runs")
            continue
        Ps = sorted({r["P"] for r in sel})
        if len(Ps) == 1:
            _bars_one_p(ax, series, Ps[0], mode)
            continue
        style = series_styles(series)
        for key, pts in sorted(series.items()):
            pts.sort()
            ax.plot([p for p, _ in pts], [t for _, t in pts], label=" ".join(key),
                    **style[key])
        ax.set_xscale("log", base=2)
        ax.set_xticks(Ps, [str(P) for P in Ps])
        ax.set(xlabel="P (MPI ranks)", ylabel=_unit(mode), title=f"{mode}: time vs P")
        legend_outside(ax)
    fig.tight_layout()
    save_png(fig, path)
    plt.close(fig)


def _bars_one_p(ax, series: dict, P: int, mode: str) -> None:
    keys = sorted(series)
    style = series_styles(keys)
    y = np.arange(len(keys))
    ax.barh(y, [min(t for _, t in series[k]) for k in keys],
            color=[style[k]["color"] for k in keys])
    ax.set_yticks(y, [" ".join(k) for k in keys], fontsize=8)
    ax.invert_yaxis()
    ax.set(xlabel=_unit(mode), title=f"{mode}: time at P = {P} (one P: bars, not lines)")


def plot_breakdown(plt, runs, path: Path) -> None:
    """Horizontal stacked bars, one per run: the names stay readable and the bars inside the
    frame however many runs there are."""
    base = _baseline(runs)
    modes = _modes(base)
    count = max([sum(r["mode"] == m for r in base) for m in modes] + [1])
    fig, axes = plt.subplots(1, len(modes), figsize=(7.5 * len(modes), 1.2 + 0.28 * count),
                             squeeze=False)
    for ax, mode in zip(axes[0], modes, strict=True):
        sel = sorted((r for r in base if r["mode"] == mode),
                     key=lambda r: (r["P"], r["f"], r["algorithm"], grid_key(r)))
        if not sel:
            _empty(ax, f"{mode} runs")
            continue
        y = np.arange(len(sel))
        left = np.zeros(len(sel))
        for ph in PHASES:
            v = np.array([r["breakdown"].get(ph, 0.0) * 1e3 for r in sel])
            ax.barh(y, v, left=left, color=COLORS[ph], label=ph)
            left += v
        ax.set_yticks(y, [f"{label(r)} P={r['P']} f={r['f']}" for r in sel], fontsize=8)
        ax.invert_yaxis()
        ax.set_xlim(0, max(left.max(), 1e-9) * 1.05)
        ax.set(xlabel=f"{_unit(mode)} (slowest rank per phase)", title=f"{mode}: breakdown")
        legend_outside(ax)
    fig.tight_layout()
    save_png(fig, path)
    plt.close(fig)


def _group_bars(ax, groups: list[str], series: dict[str, list[float]], xlabel: str,
                legend: bool = True) -> None:
    """Horizontal grouped bars: one row per group, named on the y axis in a readable size
    however long the names are; one bar per series in each row."""
    height = 0.8 / max(1, len(series))
    y = np.arange(len(groups))
    for i, (name, vals) in enumerate(series.items()):
        ax.barh(y + i * height - 0.4 + height / 2, vals, height, label=name)
    ax.set_yticks(y, groups, fontsize=8)
    ax.set_ylim(len(groups) - 0.5, -0.5)  # the first group on top
    ax.set_xlabel(xlabel)
    if legend:
        legend_outside(ax)


def _two_panels(plt, groups: int):
    """Two side-by-side panels sharing their rows (the names once, on the left)."""
    return plt.subplots(1, 2, figsize=(13, 1.6 + 0.32 * max(groups, 3)), sharey=True)


def plot_partitioners(plt, runs, path: Path) -> None:
    sel = [r for r in runs if r["codec"] == "none" and r["mode"] == "spmm"] or \
        [r for r in runs if r["codec"] == "none"]
    keys = sorted({(r["algorithm"], grid_key(r), r["P"], r["f"]) for r in sel
                   if r["P"] // r["c"] > 1})  # a single block row exchanges nothing
    fig, axes = _two_panels(plt, len(keys))
    parts = sorted({r["partitioner"] for r in sel})
    if not sel:
        for ax in axes:
            _empty(ax, "runs without codec")
    else:
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
    fig.tight_layout()
    save_png(fig, path)
    plt.close(fig)


def plot_replication(plt, runs, path: Path) -> None:
    sel = [r for r in _baseline(runs) if r["algorithm"].endswith("15d")]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    if not sel:
        for ax in axes:
            _empty(ax, "1.5D runs")
    else:
        series = defaultdict(list)
        for r in sel:
            series[(r["algorithm"], f"{r['mode']} P={r['P']} f={r['f']}")].append(r)
        style = series_styles(series)
        for key, rs in sorted(series.items()):
            rs.sort(key=lambda r: r["c"])
            cs = [r["c"] for r in rs]
            axes[0].plot(cs, [r["seconds"] * 1e3 for r in rs], label=" ".join(key),
                         **style[key])
            axes[1].plot(cs, [(sent(r).max() + max(r["per_rank"].get("allreduce_bytes", [0])))
                              / MB for r in rs], label=" ".join(key), **style[key])
        cs = sorted({r["c"] for r in sel})
        axes[0].set(xlabel="replication c", ylabel="ms per SpMM / epoch",
                    title="1.5D: time vs c")
        axes[1].set(xlabel="replication c", ylabel="max bytes per rank (MB, exchange + "
                    "all-reduce)", title="1.5D: bytes vs c")
        for ax in axes:
            ax.set_xticks(cs, [str(c) for c in cs])
        legend_outside(axes[1])
    fig.tight_layout()
    save_png(fig, path)
    plt.close(fig)


def plot_bytes_per_rank(plt, runs, path: Path) -> None:
    base = [r for r in _baseline(runs) if r["mode"] == "spmm"] or _baseline(runs)
    P = max((r["P"] for r in base), default=0)
    sel = sorted((r for r in base if r["P"] == P),
                 key=lambda r: (r["f"], r["algorithm"], grid_key(r)))
    fig, ax = plt.subplots(figsize=(8, 4.2))
    if not sel:
        _empty(ax, "runs")
    else:
        f = sel[0]["f"]
        sel = [r for r in sel if r["f"] == f]
        ranks = np.arange(P)
        w = 0.8 / len(sel)
        style = series_styles([(r["algorithm"], grid_key(r)) for r in sel])
        for i, r in enumerate(sel):
            s = sent(r) / MB
            st = style[(r["algorithm"], grid_key(r))]
            ax.bar(ranks + i * w - 0.4 + w / 2, s, w, color=st["color"],
                   hatch=HATCHES[MARKERS.index(st["marker"]) % len(HATCHES)],
                   edgecolor="white", linewidth=0,
                   label=f"{label(r)} (max/avg {s.max() / max(s.mean(), 1e-30):.2f})")
        ax.set(xlabel="rank", ylabel="bytes sent per call (MB)",
               title=f"bytes per rank, P={P}, f={f}")
        ax.set_xticks(ranks)
        legend_outside(ax)
    fig.tight_layout()
    save_png(fig, path)
    plt.close(fig)


def plot_codecs(plt, runs, path: Path) -> None:
    codec_keys = {(r["mode"], r["algorithm"], grid_key(r), r["P"], r["f"], r["partitioner"])
                  for r in runs if r["codec"] != "none"}
    sel = [r for r in runs if (r["mode"], r["algorithm"], grid_key(r), r["P"], r["f"],
                               r["partitioner"]) in codec_keys]
    fig, axes = _two_panels(plt, len(codec_keys))
    if not sel:
        for ax in axes:
            _empty(ax, "codec runs")
    else:
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
        _group_bars(axes[1], groups, {c: [pick(k, c, _accuracy) for k in keys]
                                      for c in codecs},
                    "test accuracy (train) / 1 - max rel. error (SpMM)")
        axes[1].set_title("codecs: accuracy")
    fig.tight_layout()
    save_png(fig, path)
    plt.close(fig)


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


def write_report(records: list[dict], out: str | Path) -> list[Path]:
    """Write ``summary.md`` into ``out`` and every plot of ``PLOTS`` into a sub-folder per
    graph, named after it (the same layout for one graph or many); returns the paths. A run recorded
    more than once (failed, then retried) counts with its newest record."""
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
    by_graph: dict[str, list[dict]] = defaultdict(list)
    for r in runs_of(records):
        by_graph[r["graph"]].append(r)
    if not by_graph:
        by_graph["(no successful runs)"] = []
    folders = {g: _slug(g) for g in by_graph}
    fns = dict(time_vs_P=plot_time_vs_p, breakdown=plot_breakdown,
               partitioners=plot_partitioners, replication=plot_replication,
               bytes_per_rank=plot_bytes_per_rank, codecs=plot_codecs)
    paths = []
    for graph, runs in by_graph.items():
        folder = out / folders[graph]
        folder.mkdir(exist_ok=True)
        for name in PLOTS:
            path = folder / f"{name}.png"
            fns[name](plt, runs, path)
            paths.append(path)
    md = out / "summary.md"
    write_text_atomic(md, summary(records, by_graph, folders) if any(by_graph.values())
                      else "# Benchmark report\n\nNo successful runs.\n")
    return [*paths, md]
