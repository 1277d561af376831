"""Every result of ``bench/results/`` written again from its stored JSON: the one table writer.

    python -m bench.tables              # write each result's Markdown (and plot) again
    python -m bench.tables --check      # write nothing: list what differs (exit 1 if any)
    python -m bench.tables scale floor  # some results only

A result is a Markdown file that a benchmark module renders from its JSON (``RESULTS``: the
module's ``render``, and ``plot`` where it draws a PNG); the published sweep
(``bench/results/sweep``: ``spmmgnn report``'s summary and plots, ``spmmgnn model``'s plot)
is one more. Results whose JSON is not stored (raw JSON stays local, ``.gitignore``) are
kept as their Markdown; so are ``DOCUMENTED``: studies no longer run, hand-written tables
and measurements of other machines, each with the command that made it.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from bench import RESULTS


@dataclass(frozen=True)
class Result:
    """``bench/results/STEM.md`` (and ``.json``), rendered by ``bench.MODULE``'s ``render``;
    ``load``: the module's reader of the stored JSON (default: the JSON alone); ``plot``:
    its ``plot(data, path)`` of ``STEM.png``."""
    stem: str
    module: str
    load: str | None = None
    plot: str | None = None

    def function(self, name: str):
        return getattr(importlib.import_module(f"bench.{self.module}"), name)

    def data(self, folder: Path) -> dict:
        if self.load:
            return self.function(self.load)(folder / self.stem)
        return json.loads((folder / f"{self.stem}.json").read_text())


RESULTS_TABLE = [
    Result("kernel-choice", "kernel_choice"),
    *(Result(f"kernels-{g}", "kernels", plot="plot") for g in ("random", "rmat",
                                                              "rmat-blocked")),
    Result("scale", "scale"),
    Result("partition_real", "partition", load="load_result"),
    Result("send_balance_real", "send_balance"),
    Result("readme-timings", "readme_timings"),
    Result("floor", "floor"),
    Result("node-scaling", "node_scaling"),
    Result("dense-ops", "dense_ops"),
    Result("thread-timeout", "thread_timeout"),
    Result("node-default", "node_default"),
    Result("row-weight", "row_weight"),
    Result("percall", "percall"),
    Result("grid", "grid"), Result("grid-quick", "grid"),
    Result("node-aware", "node_aware"), Result("node-aware-quick", "node_aware"),
    Result("gpu-cpu-quick", "gpu"),
    Result("prepost", "prepost"),
    Result("reorder", "reorder"),
    Result("delayed", "delayed"), Result("delayed-metis", "delayed"),
    Result("petsc", "petsc"),
]
RESULTS_BY_STEM = {r.stem: r for r in RESULTS_TABLE}

# Markdown kept as written: no module renders it (again) from JSON.
DOCUMENTED = {
    "readme-measurements": "the tables the README carried, kept verbatim",
    "strategies": "a table made by hand from `bench.spmm`'s JSON",
    "train": "a table made by hand from `bench.train`'s JSON",
    "gpu": "one run on a lent H100, with its notes (`python -m bench.gpu` writes gpu.md)",
    "node-scaling-16cores": "runs on a lent GPU machine's 16 cores, with their notes",
    "node-scaling-ab": "a before / after comparison, made by hand",
    "large-graph": "a study of issue 47 (its scripts retired)",
    "partition-threads": "a study no longer run (its scripts retired)",
    "agreement": "a study no longer run (its script retired)",
    "partition_wait": "a study no longer run (its script retired)",
    "shared-exchange": "a study no longer run (its script retired)",
    "threads-under-load": "a study no longer run (its script retired)",
}

SWEEP = RESULTS / "sweep"


def model_figure(plt, folder: Path = SWEEP):
    """``spmmgnn model``'s plot of the published sweep (``model_cluster.png``) from its
    stored predictions."""
    from spmmgnn.benchmark.plots import model_figure as draw

    model = json.loads((folder / "model_cluster.json").read_text())
    return draw(plt, model["predictions"], model["graph"], model["f"], model["layers"])


def sweep_figures(folder: Path = SWEEP):
    """The published sweep's figures as the current code draws them from its stored data:
    ``(path, figure)`` for the report's plots and the model's."""
    from spmmgnn.benchmark.plots import pyplot
    from spmmgnn.benchmark.records import read_records
    from spmmgnn.benchmark.report import report_figures

    for sub, name, fig in report_figures(read_records(folder / "results.jsonl")):
        yield folder / "report" / sub / f"{name}.png", fig
    yield folder / "model_cluster.png", model_figure(pyplot(), folder)


def sweep_summary(folder: Path = SWEEP) -> str:
    """The published sweep's ``summary.md`` as the current code writes it."""
    from spmmgnn.benchmark.records import read_records
    from spmmgnn.benchmark.report import report_summary

    return report_summary(read_records(folder / "results.jsonl"))


def stored(folder: Path = RESULTS) -> list[Result]:
    """The results whose JSON is stored in ``folder``."""
    return [r for r in RESULTS_TABLE if (folder / f"{r.stem}.json").exists()]


def differences(results: list[Result], folder: Path = RESULTS,
                sweep: Path | None = SWEEP) -> list[str]:
    """What differs between the stored files and what the current code writes from the
    stored JSON: Markdown text, and plots by their signature."""
    from spmmgnn.benchmark.plots import figure_signature, pyplot, stored_signature

    plt = pyplot()
    out = []
    for r in results:
        data = r.data(folder)
        md = folder / f"{r.stem}.md"
        if not md.exists() or md.read_text() != r.function("render")(data):
            out.append(f"{md}: not what its JSON renders to")
        if r.plot:
            fig = r.function("figure")(plt, data)
            png = folder / f"{r.stem}.png"
            if not png.exists() or stored_signature(png) != figure_signature(fig):
                out.append(f"{png}: not what the current code draws from its JSON")
            plt.close(fig)
    if sweep is not None:
        if (sweep / "report" / "summary.md").read_text() != sweep_summary(sweep):
            out.append(f"{sweep / 'report' / 'summary.md'}: not what results.jsonl renders to")
        for path, fig in sweep_figures(sweep):
            if not path.exists() or stored_signature(path) != figure_signature(fig):
                out.append(f"{path}: not what the current code draws from the stored data")
            plt.close(fig)
    return out


def write(results: list[Result], folder: Path = RESULTS, sweep: Path | None = SWEEP) -> None:
    """Write every result's Markdown (and plot) again from its stored JSON."""
    from spmmgnn.benchmark.plots import pyplot, save_png
    from spmmgnn.benchmark.records import read_records
    from spmmgnn.benchmark.report import write_report
    from spmmgnn.runtime.atomic import write_text_atomic

    for r in results:
        data = r.data(folder)
        write_text_atomic(folder / f"{r.stem}.md", r.function("render")(data))
        if r.plot:
            r.function(r.plot)(data, folder / f"{r.stem}.png")
        print(f"wrote {folder / r.stem}.md", flush=True)
    if sweep is not None:
        write_report(read_records(sweep / "results.jsonl"), sweep / "report")
        plt = pyplot()
        fig = model_figure(plt, sweep)
        save_png(fig, sweep / "model_cluster.png")
        plt.close(fig)
        print(f"wrote {sweep / 'report'} and {sweep / 'model_cluster.png'}", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("stems", nargs="*", help="results to write (default: all; 'sweep' for the "
                    "published sweep)")
    ap.add_argument("--check", action="store_true",
                    help="write nothing; list the files that differ (exit 1 if any)")
    args = ap.parse_args(argv)
    unknown = [s for s in args.stems if s not in RESULTS_BY_STEM and s != "sweep"]
    if unknown:
        ap.error(f"unknown results {unknown}; choose among {sorted(RESULTS_BY_STEM)} or sweep")
    chosen = [RESULTS_BY_STEM[s] for s in args.stems if s != "sweep"] if args.stems else \
        RESULTS_TABLE
    missing = [r.stem for r in chosen if r not in stored()]
    results = [r for r in chosen if r in stored()]
    sweep = SWEEP if not args.stems or "sweep" in args.stems else None
    if missing:
        print(f"kept as written (no JSON stored): {', '.join(missing)}", flush=True)
    if args.check:
        diff = differences(results, sweep=sweep)
        print("\n".join(diff) or f"{len(results)} result(s) and the sweep are what their JSON "
              "renders to", flush=True)
        return 1 if diff else 0
    write(results, sweep=sweep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
