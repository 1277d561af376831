"""Plots a person can read, drawn the same way on every machine.

The rules every figure of the project keeps (``tests/benchmark/test_plots.py`` checks them on the
figures themselves): written at ``DPI`` (>= 100); tick labels and legends at least 8 pt; no
two series of a panel share colour and marker; no series lies hidden under another (series
that coincide are drawn once, named together); no panel without data (a figure with nothing
to show is one line of text).

A PNG carries the signature of what it draws (``figure_signature``: titles, labels, ticks,
every series' points and style, rounded) in its ``Description`` text chunk and no date or
software version, so the same data gives the same file, and a test can tell whether a stored
PNG is what the current code draws from the stored data.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np

DPI = 120
FONT_PT = 9       # titles and axis labels
SMALL_PT = 8      # tick labels and legends: the smallest text of a figure
SIGNATURE = "spmmgnn figure "
# one colour per algorithm family (tab10, then Dark2: 18 before one repeats), and within a
# family one marker and line style per variant (c, grid, width), so no two series look alike
PALETTE = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown",
           "tab:pink", "tab:gray", "tab:olive", "tab:cyan", "#1b9e77", "#d95f02", "#7570b3",
           "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#000000")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
LINESTYLES = ("-", "--", ":", "-.")
HATCHES = ("", "///", "...", "xxx", "\\\\\\", "ooo", "+++", "---")  # bars: a variant's pattern
COINCIDE = 0.01   # series closer than this share of the panel's span (~3 px) are drawn as one


def pyplot():
    """matplotlib.pyplot with the file-only Agg backend (works without a display) and the
    project's fonts: matplotlib's own DejaVu Sans, so every machine lays text out alike."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.family": "DejaVu Sans", "font.size": FONT_PT,
                         "axes.titlesize": FONT_PT + 1, "axes.labelsize": FONT_PT,
                         "xtick.labelsize": SMALL_PT, "ytick.labelsize": SMALL_PT,
                         "legend.fontsize": SMALL_PT, "figure.dpi": DPI,
                         "savefig.dpi": DPI, "hatch.linewidth": 0.8})
    return plt


def series_styles(keys) -> dict:
    """``{(family, variant): dict(color=, marker=, linestyle=)}``: the family (an algorithm)
    decides the colour, always the same one for the same algorithm; the variant the marker
    and the line style. No two keys share colour and marker (families beyond the palette
    share a colour and take the markers that colour has left)."""
    from ..algorithms import ALGORITHMS

    known = sorted(ALGORITHMS)
    families = sorted({f for f, _ in keys}, key=lambda f: (f not in known, f))
    unknown = [f for f in families if f not in known]
    index = {f: known.index(f) if f in known else len(known) + unknown.index(f)
             for f in families}
    used: dict[str, int] = {}   # markers handed out per colour
    out = {}
    for f in families:
        color = PALETTE[index[f] % len(PALETTE)]
        for v in sorted({v for g, v in keys if g == f}):
            m = used.get(color, 0)
            used[color] = m + 1
            out[(f, v)] = dict(color=color, marker=MARKERS[m % len(MARKERS)],
                               linestyle=LINESTYLES[(m // len(MARKERS)) % len(LINESTYLES)])
    return out


def legend_outside(ax, **kw) -> None:
    """The legend right of the axes, never over the data (``save_png`` keeps it in)."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=SMALL_PT, loc="upper left", bbox_to_anchor=(1.02, 1.0),
                  borderaxespad=0.0, frameon=False, **kw)


def _scaled(values, log: bool) -> np.ndarray:
    v = np.asarray(values, dtype=float)
    if log:
        with np.errstate(divide="ignore", invalid="ignore"):
            v = np.where(v > 0, np.log10(np.where(v > 0, v, 1.0)), np.nan)
    return v


def coincident(series: dict, log: bool = False) -> list[list]:
    """Groups of the keys of ``series`` (``{key: (xs, ys)}``) whose points coincide on the
    panel: the same x values and, at each, y values within ``COINCIDE`` of the span of all
    the panel's y values (in log10 on a log axis). Drawn one over the other, all but the
    last would be hidden: each group is drawn once. (Series a few pixels apart stay apart:
    their hollow markers of different shapes or colours both show.)"""
    ys = [y for _, (_, vals) in series.items() for y in _scaled(vals, log)]
    finite = [y for y in ys if math.isfinite(y)]
    span = (max(finite) - min(finite)) if finite else 0.0
    tol = COINCIDE * span if span > 0 else 1e-12
    groups: list[list] = []
    for key in series:
        xs, vals = series[key]
        for group in groups:
            gx, gvals = series[group[0]]
            if list(gx) == list(xs) and np.all(
                    np.abs(_scaled(gvals, log) - _scaled(vals, log)) <= tol):
                group.append(key)
                break
        else:
            groups.append([key])
    return groups


def joined_label(keys: list, equal: bool = True) -> str:
    """One legend entry for series drawn as one: ``a = b c=1`` when they share the variant
    (``≈`` when their values are close but not equal), or the full names joined."""
    sign = " = " if equal else " ≈ "
    names = [" ".join(k).strip() if isinstance(k, tuple) else str(k) for k in keys]
    if len(keys) == 1:
        return names[0]
    if all(isinstance(k, tuple) and len(k) == 2 for k in keys) and \
            len({k[1] for k in keys}) == 1:
        v = keys[0][1]
        return sign.join(k[0] for k in keys) + (f" {v}" if v else "")
    return sign.join(names)


def draw_lines(ax, series: dict, styles: dict, log: bool = False, **kw) -> None:
    """``series`` (``{key: (xs, ys)}``) as lines with hollow markers in ``styles``' looks
    (two markers on one point both show), coinciding series drawn once and named
    together."""
    for group in coincident(series, log):
        xs, ys = series[group[0]]
        equal = all(np.allclose(series[k][1], ys, rtol=1e-9, atol=0.0) for k in group)
        ax.plot(xs, ys, label=joined_label(group, equal), markerfacecolor="none",
                markeredgewidth=1.4, **styles[group[0]], **kw)


def note_figure(plt, text: str):
    """A figure with nothing to plot: one line saying so, no empty axes."""
    fig = plt.figure(figsize=(6.0, 0.8))
    fig.text(0.5, 0.5, text, ha="center", va="center")
    return fig


def finish(fig) -> None:
    """Tick labels at ``SMALL_PT`` however the axes were made, and a tight layout."""
    for ax in fig.axes:
        ax.tick_params(labelsize=SMALL_PT)
    if fig.axes:
        fig.tight_layout()


def _round(v):
    if isinstance(v, (list, tuple, np.ndarray)):
        return [_round(x) for x in np.asarray(v, dtype=object).ravel().tolist()]
    if isinstance(v, (float, np.floating)):
        return f"{float(v):.5g}"
    return v


def _colour(c) -> str:
    from matplotlib.colors import to_hex

    try:
        return to_hex(c, keep_alpha=True)
    except ValueError:
        return str(c)


def figure_signature(fig) -> str:
    """A short hash of what ``fig`` draws: its size, its texts, and per axes the title,
    labels, scales, limits, ticks and their labels, every line's points, colour, marker and
    style, every bar's place, size, colour and hatch, and the legend's entries (numbers to
    5 significant digits), once laid out (``finish``). The same data drawn by the same code
    gives the same signature on any machine."""
    finish(fig)
    fig.canvas.draw()
    title = fig.get_suptitle() if hasattr(fig, "get_suptitle") else ""
    parts: list = [["size", _round(list(fig.get_size_inches()))],
                   ["texts", title, [t.get_text() for t in fig.texts]]]
    for ax in fig.axes:
        parts.append(["axes", ax.get_title(), ax.get_xlabel(), ax.get_ylabel(),
                      ax.get_xscale(), ax.get_yscale(), _round(ax.get_xlim()),
                      _round(ax.get_ylim())])
        for axis in (ax.xaxis, ax.yaxis):
            parts.append(["ticks", _round(axis.get_ticklocs()),
                          [t.get_text() for t in axis.get_ticklabels()]])
        for line in ax.get_lines():
            parts.append(["line", line.get_label(), _round(line.get_xdata()),
                          _round(line.get_ydata()), _colour(line.get_color()),
                          str(line.get_marker()), str(line.get_linestyle())])
        for p in ax.patches:
            box = p.get_bbox().bounds if hasattr(p, "get_bbox") else ()
            parts.append(["patch", type(p).__name__, _round(list(box)),
                          _colour(p.get_facecolor()), p.get_hatch() or ""])
        parts.append(["texts", [t.get_text() for t in ax.texts]])
        legend = ax.get_legend()
        if legend is not None:
            parts.append(["legend", [t.get_text() for t in legend.get_texts()]])
    text = json.dumps(parts, default=str, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def stored_signature(path: str | Path) -> str | None:
    """The signature a PNG written by ``save_png`` carries (None for other PNGs)."""
    from PIL import Image

    with Image.open(path) as im:
        text = im.text.get("Description", "") if hasattr(im, "text") else ""
    return text[len(SIGNATURE):] if text.startswith(SIGNATURE) else None


def save_png(fig, path) -> None:
    """Write a figure atomically (``atomic.atomic_path``: never half a PNG, never a device
    replaced) at ``DPI``, with its signature and without a date or software version."""
    from ..runtime.atomic import atomic_path

    meta = {"Software": None, "Description": SIGNATURE + figure_signature(fig)}
    with atomic_path(path, "plot") as tmp:
        fig.savefig(tmp, dpi=DPI, format="png", bbox_inches="tight", metadata=meta)


# ---------------------------------------------------------------- the model's plot
PANELS = (("1d", "1D"), ("1.5d", "1.5D"), ("2d", "2D"), ("3d", "3D"))


def _panel_of(algorithm: str) -> str:
    """The panel of an algorithm: the widest grid it runs on (1D, 1.5D, 2D, 3D)."""
    from ..algorithms import ALGORITHMS

    cls = ALGORITHMS.get(algorithm.split(" ")[0])
    kinds = getattr(cls, "grid_kinds", ("1d",)) if cls is not None else ("1d",)
    return kinds[-1]


def model_series(rows: list[dict]) -> dict:
    """``{(algorithm, variant): [(P, ms per epoch)]}`` of ``spmmgnn model``'s rows: one line
    per algorithm and c (2D/3D: the grid's shape changes with P), exchange, ranks per node
    and device link."""
    lines: dict[tuple, list] = {}
    for r in rows:
        variant = "" if r.get("grid") else f"c={r['c']}"
        if r.get("exchange_kind"):
            variant += f" {r['exchange_kind']}"
        if r.get("ranks_per_node"):
            variant += f" K={r['ranks_per_node']}"
        if r.get("device_link"):
            variant += f" GPU {r['device_link']}"
        lines.setdefault((r["algorithm"], variant.strip()), []).append(
            (r["P"], r["epoch_seconds"] * 1e3))
    return lines


def model_figure(plt, rows: list[dict], graph: str, features: int, layers: int):
    """Predicted ms per epoch against P, one panel per grid family (1D, 1.5D, 2D, 3D: a
    handful of lines each), the same log axes in every panel so they compare."""
    lines = model_series(rows)
    if not lines:
        return note_figure(plt, f"model: no predictions for {graph}")
    style = series_styles(lines)
    panels = [(kind, name) for kind, name in PANELS
              if any(_panel_of(a) == kind for a, _ in lines)]
    cols = min(2, len(panels))
    nrows = -(-len(panels) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(6.4 * cols, 3.6 * nrows), squeeze=False,
                             sharex=True, sharey=True)
    for ax, (kind, name) in zip(axes.ravel(), panels, strict=False):
        mine = {k: ([p for p, _ in sorted(v)], [t for _, t in sorted(v)])
                for k, v in sorted(lines.items()) if _panel_of(k[0]) == kind}
        draw_lines(ax, mine, style, log=True)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"{name} algorithms")
        ax.set(xlabel="P (MPI ranks)", ylabel=f"predicted ms per epoch ({2 * layers} SpMMs)")
        ax.tick_params(labelbottom=True, labelleft=True)
        legend_outside(ax)
    for ax in axes.ravel()[len(panels):]:
        fig.delaxes(ax)
    fig.suptitle(f"model: {graph}, f={features}", fontsize=FONT_PT + 1)
    return fig


def plot_file(path, draw, *args) -> bool:
    """``draw(plt, *args)``'s figure written to ``path`` by ``save_png``; False (nothing
    written) where matplotlib is not installed."""
    try:
        plt = pyplot()
    except ImportError:
        return False
    fig = draw(plt, *args)
    save_png(fig, path)
    plt.close(fig)
    return True


def plot_model(rows: list[dict], graph: str, features: int, layers: int, path) -> None:
    """``spmmgnn model -o PNG``: ``model_figure`` written to ``path``."""
    plot_file(path, model_figure, rows, graph, features, layers)
