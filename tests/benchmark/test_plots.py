"""Every figure the project draws keeps the rules of ``spmmgnn.benchmark.plots``, checked on
the figures themselves: written at dpi >= 100; tick labels and legends >= 8 pt; no two series
of a panel with the same colour and marker (bars: colour and hatch); no series hidden under
another; no panel without data. The figures: the published sweep's report and model plot
and the kernels' plots as drawn from their stored data, and the report, the model plot and
``bench.spmm``'s plot of results that stress them (every algorithm, coinciding series,
empty views)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from spmmgnn.benchmark.plots import (
    DPI,
    figure_signature,
    finish,
    model_figure,
    pyplot,
    save_png,
    stored_signature,
)

ROOT = Path(__file__).resolve().parents[2]
MIN_PT, MIN_DPI, HIDDEN_PX = 8, 100, 2.0


def _look(color) -> str:
    from matplotlib.colors import to_hex

    return to_hex(color)


def _hidden_lines(ax) -> list[str]:
    """Lines whose every point lies within HIDDEN_PX of a later line's, with the same
    marker (a hollow marker of another shape still shows)."""
    lines = [ln for ln in ax.get_lines() if len(ln.get_xdata())]
    out = []
    for i, a in enumerate(lines):
        pa = ax.transData.transform(np.column_stack([a.get_xdata(), a.get_ydata()]))
        for b in lines[i + 1:]:
            pb = ax.transData.transform(np.column_stack([b.get_xdata(), b.get_ydata()]))
            same_marker = a.get_marker() == b.get_marker() or a.get_marker() in ("", "None")
            if pa.shape == pb.shape and same_marker and np.all(
                    np.hypot(*(pa - pb).T) < HIDDEN_PX):
                out.append(f"{a.get_label()!r} under {b.get_label()!r}")
    return out


def _hidden_bars(ax) -> list[str]:
    """Bar series whose every non-empty bar is covered by a bar of a later series."""
    def boxes(c):
        return [p.get_window_extent().bounds for p in c.patches
                if abs(p.get_width()) > 0 and abs(p.get_height()) > 0]

    conts = [c for c in ax.containers if hasattr(c, "patches")]
    out = []
    for i, a in enumerate(conts):
        mine = boxes(a)
        if not mine:
            continue
        later = [b for c in conts[i + 1:] for b in boxes(c)]
        if all(any(np.allclose(m, b, atol=1.0) for b in later) for m in mine):
            out.append(f"bars {a.get_label()!r} under later bars")
    return out


def problems(fig, png: Path | None = None, drawn: bool = False) -> list[str]:
    """Each rule the figure (and its PNG) breaks, in words (``drawn``: the figure was drawn
    as it is now, its ticks are set)."""
    from matplotlib.patches import Rectangle

    out = []
    if png is not None:
        from PIL import Image

        with Image.open(png) as im:
            dpi = im.info.get("dpi", (0, 0))[0]
        if round(dpi) < MIN_DPI:
            out.append(f"{png.name}: {dpi:.0f} dpi")
    if not drawn:
        fig.canvas.draw()
    for i, ax in enumerate(fig.axes):
        name = ax.get_title() or f"panel {i}"
        texts = [t for t in ax.get_xticklabels() + ax.get_yticklabels()
                 if t.get_visible() and t.get_text()]
        legend = ax.get_legend()
        texts += list(legend.get_texts()) if legend is not None else []
        small = sorted({t.get_fontsize() for t in texts if t.get_fontsize() < MIN_PT})
        if small:
            out.append(f"{name}: text at {small} pt")
        lines = [ln for ln in ax.get_lines()
                 if any(math.isfinite(float(y)) for y in np.asarray(ln.get_ydata(), float))]
        bars = [p for p in ax.patches if isinstance(p, Rectangle)
                and abs(p.get_width()) > 0 and abs(p.get_height()) > 0]
        if not lines and not bars and not ax.images:
            out.append(f"{name}: an empty panel")
        looks = [(_look(ln.get_color()), str(ln.get_marker())) for ln in ax.get_lines()]
        looks += [(_look(c.patches[0].get_facecolor()), c.patches[0].get_hatch() or "")
                  for c in ax.containers if getattr(c, "patches", None)
                  and c.get_label() and not c.get_label().startswith("_")]
        twins = {lk for lk in looks if looks.count(lk) > 1}
        if twins:
            out.append(f"{name}: series share colour and marker {sorted(twins)}")
        out += [f"{name}: {h}" for h in _hidden_lines(ax) + _hidden_bars(ax)]
    return out


def _check(fig) -> list[str]:
    """The rules ``fig`` breaks once laid out as ``save_png`` lays it out."""
    finish(fig)
    got = problems(fig)
    pyplot().close(fig)
    return got


# ------------------------------------------------------------------ the checker itself
def test_the_checker_sees_every_broken_rule(tmp_path):
    plt = pyplot()
    fig, (a, b) = plt.subplots(1, 2)
    a.plot([1, 2], [1, 2], "o-", color="tab:blue", label="one")
    a.plot([1, 2], [1, 2], "o--", color="tab:blue", label="two")     # same look, hidden
    a.legend(fontsize=6)
    a.tick_params(labelsize=7)
    b.set_title("nothing")
    fig.savefig(tmp_path / "bad.png", dpi=72)
    got = problems(fig, tmp_path / "bad.png")
    assert any("72 dpi" in g for g in got), got
    assert any("text at [6.0, 7.0] pt" in g for g in got), got
    assert any("share colour and marker" in g for g in got), got
    assert any("'one' under 'two'" in g for g in got), got
    assert any("nothing: an empty panel" in g for g in got), got
    fig, ax = plt.subplots()
    ax.bar([0, 1], [1, 2], color="tab:red", label="x")
    ax.bar([0, 1], [1, 2], color="tab:blue", label="y")
    assert any("bars 'x' under later bars" in g for g in problems(fig)), problems(fig)
    plt.close("all")


# ------------------------------------------------------------------ the stored figures
def test_the_published_pngs_are_what_the_code_draws_and_keep_the_rules():
    """The sweep's report and model plot and the kernels' plots, drawn by the current code
    from the stored data: each is the committed PNG (its signature) and keeps the rules;
    every committed PNG is at DPI and, when it plots data, at least 600 x 300 px
    (breakdown.png was 597 x 156 px at 80 dpi)."""
    from PIL import Image

    from bench import kernels
    from bench.tables import sweep_figures

    plt = pyplot()
    figures = list(sweep_figures())
    for g in ("random", "rmat", "rmat-blocked"):
        data = json.loads((ROOT / "bench" / "results" / f"kernels-{g}.json").read_text())
        figures.append((ROOT / "bench" / "results" / f"kernels-{g}.png",
                        kernels.figure(plt, data)))
    assert len(figures) == 16
    got = []
    for path, fig in figures:
        if stored_signature(path) != figure_signature(fig):   # lays out and draws it
            got.append(f"{path.name}: not what the code draws")
        got += [f"{path.name}: {p}" for p in problems(fig, path, drawn=True)]
        with Image.open(path) as im:
            (w, h), dpi = im.size, im.info["dpi"][0]
        note = not fig.axes   # a view without data: one line of text
        if round(dpi) != DPI or not (note or (w >= 600 and h >= 300)):
            got.append(f"{path.name}: {w} x {h} px at {dpi:.0f} dpi")
        plt.close(fig)
    assert not got, got


# ------------------------------------------------------------------ figures under stress
ALGOS = [("oblivious1d", 1, None), ("sparse1d", 1, None), ("prepost1d", 1, None),
         ("featureparallel", 1, None), ("oblivious15d", 2, None), ("sparse15d", 2, None),
         ("oblivious2d", 1, "2x2"), ("sparse2d", 1, "2x2"), ("oblivious3d", 1, "2x1x2"),
         ("sparse3d", 1, "2x1x2"), ("plexus3d", 1, "2x1x2")]


def _records() -> list[dict]:
    """Every algorithm at P = 1, 2, 4, both modes, two widths, two partitioners, a codec;
    oblivious3d's times and bytes equal sparse3d's (the series the old plots hid)."""
    recs = []
    for P in (1, 2, 4):
        for k, (algo, c, grid) in enumerate(ALGOS):
            if c > P or (grid and P != 4):
                continue
            same = k if algo != "oblivious3d" else k + 1   # = sparse3d's numbers
            for mode in ("spmm", "train"):
                for f in (16, 128):
                    for part in ("none", "metis-vol") if c == 1 and not grid else ("none",):
                        for codec in ("none", "int2") if algo == "sparse1d" else ("none",):
                            sent = [1000 * (q + same) * f // 16 for q in range(P)]
                            r = dict(mode=mode, graph="random:n=100", algorithm=algo, P=P, c=c,
                                     grid=grid, partitioner=part, codec=codec, f=f, n=100,
                                     nnz=800, run_id=f"{mode}{algo}{P}{f}{part}{codec}",
                                     seconds=1e-3 * P * (1 + same / 5) * f / 16,
                                     breakdown=dict(local=4e-4, exchange=3e-4 * same,
                                                    allreduce=1e-4 * (c > 1), dense=1e-4),
                                     per_rank=dict(bytes_sent=sent, allreduce_bytes=[64] * P))
                            r.update(accuracy=0.8) if mode == "train" else r.update(
                                max_rel_error=1e-7)
                            recs.append(r)
    return recs


@pytest.mark.slow
def test_the_report_keeps_the_rules_with_every_algorithm():
    from spmmgnn.benchmark.report import report_figures

    got = []
    for _folder, name, fig in report_figures(_records()):
        got += [f"{name}: {p}" for p in _check(fig)]
    assert not got, got


def test_the_report_of_nothing_is_notes_not_empty_panels():
    from spmmgnn.benchmark.report import report_figures

    recs = [r for r in _records() if r["algorithm"] == "sparse1d" and r["P"] == 1
            and r["codec"] == "none"]
    figs = {name: fig for _, name, fig in report_figures(recs)}
    for name in ("partitioners", "replication", "codecs"):   # no exchange, 1.5D, codec runs
        assert not figs[name].axes and figs[name].texts, name
    got = [f"{n}: {p}" for n, fig in figs.items() for p in _check(fig)]
    assert not got, got


def _model_rows() -> list[dict]:
    rows = []
    for P in (64, 256, 1024):
        for k, (algo, _, grid) in enumerate(ALGOS):
            for c in ((1, 2, 4, 8) if algo.endswith("15d") else (1,)):
                same = k if algo != "oblivious3d" else k + 1   # = sparse3d's
                rows.append(dict(P=P, c=c, algorithm=algo, grid="2x2x2" if grid else None,
                                 epoch_seconds=1e-3 * (1 + same) * (P / 64) ** (0.2 * same - 1)
                                 * (1 + 0.3 * c)))
    return rows


def test_the_model_plot_keeps_the_rules_and_shows_sparse3d():
    """17 series in one 551 x 353 px panel, oblivious3d drawn over sparse3d: now a panel per
    grid family, and series that coincide drawn once, named together."""
    plt = pyplot()
    fig = model_figure(plt, _model_rows(), "rmat:scale=20", 128, 2)
    labels = {ax.get_title(): [ln.get_label() for ln in ax.get_lines()] for ax in fig.axes}
    assert labels["3D algorithms"] == ["oblivious3d = sparse3d", "plexus3d"], labels
    assert max(len(v) for v in labels.values()) <= 8
    assert not _check(fig)


def test_the_kernels_and_spmm_plots_keep_the_rules():
    from bench import spmm

    rows = [dict(algorithm=a, c=c, P=4, f=f, exchange_s=1e-3 * k, multiply_s=2e-3,
                 allreduce_s=1e-3 * (c > 1)) for f in (16, 128)
            for k, (a, c, _) in enumerate(ALGOS)]
    assert not _check(spmm.figure(pyplot(), rows))


@pytest.mark.slow
def test_the_same_data_draws_the_same_png(tmp_path):
    """Byte for byte at DPI: no date, no software version in the file."""
    from PIL import Image

    rows = _model_rows()[:40]
    for name in ("a.png", "b.png"):
        save_png(model_figure(pyplot(), rows, "g", 8, 2), tmp_path / name)
        pyplot().close("all")
    assert (tmp_path / "a.png").read_bytes() == (tmp_path / "b.png").read_bytes()
    with Image.open(tmp_path / "a.png") as im:
        assert round(im.info["dpi"][0]) == DPI >= MIN_DPI


def test_series_styles_tell_every_series_apart():
    """20 series over 10 families, and more families than colours (model.png had two
    families on one colour): a family has one colour, the same in every plot; no two series
    share colour, marker and line style."""
    from spmmgnn import ALGORITHMS
    from spmmgnn.benchmark.report import series_styles

    keys = [(a, v) for a in sorted(ALGORITHMS) for v in ("c=1", "c=2")]
    keys += [("future1d", "c=1"), ("future2d", "2x2")] + [(f"x{i}", "") for i in range(12)]
    style = series_styles(keys)
    looks = {(s["color"], s["marker"], s["linestyle"]) for s in style.values()}
    assert len(looks) == len(keys)
    colours = {a: {style[k]["color"] for k in keys if k[0] == a} for a, _ in keys}
    assert all(len(c) == 1 for c in colours.values())
    first = [colours[a].copy().pop() for a in sorted(ALGORITHMS)]
    assert len(set(first)) == len(first)  # every algorithm its own colour
    assert series_styles([("sparse1d", "c=1")])[("sparse1d", "c=1")]["color"] == \
        style[("sparse1d", "c=1")]["color"]  # the same colour whatever else is plotted
