"""Runs ``bench.recipes`` on the five grids of the docs and writes their table.

    python -m bench.recipes_table                                   # print the table
    python -m bench.recipes_table --write docs/research-recipes.md  # and replace the docs'

The grids: P = 1, P = 2, P = 4 with c = 2 (1.5D), the 2D grid 2 x 2 and the 3D grid
2 x 1 x 2, one ``mpiexec -n P python -m bench.recipes GRID`` each, one after the other, with
one thread per rank and for scipy. ``--write`` replaces what lies between the two markers
of the docs page (the date, the load average before and after, and the table), atomically;
``--runs`` picks some of the grids (``1:1d 4:c2``). Run it on a quiet machine: the load
average is printed beside the numbers, and a P > 1 row on a loaded machine measures the load.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from bench import ROOT
from spmmgnn.benchmark.harness import python_module, run_mpi
from spmmgnn.benchmark.tables import md_table
from spmmgnn.runtime.atomic import write_text_atomic

# (P, GRID argument of recipes.py, the docs' name of the run)
RUNS = ((1, "1d", "P = 1"), (2, "1d", "P = 2"), (4, "c2", "P = 4, c = 2 (1.5D)"),
        (4, "2x2", "2 × 2"), (4, "2x1x2", "2 × 1 × 2"))
START = "<!-- bench/recipes_table.py: start -->"   # the markers on the docs page
END = "<!-- bench/recipes_table.py: end -->"
ONE_THREAD = dict(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", SPMMGNN_THREADS="1")


def run_one(P: int, grid: str, name: str, timeout: float = 1800) -> list[str]:
    """The Markdown rows of one grid, its run named ``name``."""
    proc = run_mpi(P, python_module("bench.recipes", grid), env=ONE_THREAD, timeout=timeout,
                   cwd=ROOT)
    prefix = f"| P = {P}, {grid} |"
    rows = [ln.replace(prefix, f"| {name} |", 1) for ln in proc.stdout.splitlines()
            if ln.startswith(prefix)]
    if not rows:
        raise SystemExit(f"mpiexec -n {P} python -m bench.recipes {grid} printed no row:\n"
                         f"{proc.stdout[-3000:]}")
    return rows


def render(rows: list[str], started: str, ended: str, load: tuple[float, float],
           command: str) -> str:
    """The block between the markers: how it was measured, then the table."""
    quiet = "" if max(load) <= 2 else (
        " **The machine was loaded**: at P > 1 the ranks share its cores with that load, so "
        "every collective waits for a rank that is not scheduled, and those rows measure the "
        "load more than the library.")
    return "\n".join([
        f"Measured on {started[:10]} between {started[11:16]} and {ended[11:16]} UTC with "
        f"`{command}` (one `mpiexec -n P python -m bench.recipes GRID` per row group, one "
        "thread per rank and for scipy: `OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 "
        f"SPMMGNN_THREADS=1`); load average {load[0]:.1f} before, {load[1]:.1f} after."
        + quiet, "",
        *md_table(["run", "workload", "distributed", "scipy", "ratio"], [], "llrrr",
                  spaced=True), *rows])


def replace_block(text: str, block: str) -> str:
    """``text`` with what lies between START and END replaced by ``block``."""
    if text.count(START) != 1 or text.count(END) != 1 or text.index(START) > text.index(END):
        raise SystemExit(f"the page needs one {START} and one {END} line, in that order")
    head, rest = text.split(START)
    return f"{head}{START}\n{block}\n{END}{rest.split(END, 1)[1]}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", metavar="PAGE", help="replace the table of this page")
    parser.add_argument("--runs", nargs="+", metavar="P:GRID",
                        help="some of the grids (default: all five)")
    args = parser.parse_args(argv)
    runs = RUNS
    if args.runs:
        names = {f"{P}:{g}": (P, g, name) for P, g, name in RUNS}
        unknown = [r for r in args.runs if r not in names]
        if unknown:
            parser.error(f"unknown runs {unknown}; choose among {sorted(names)}")
        runs = tuple(names[r] for r in args.runs)
    started, before = time.strftime("%Y-%m-%dT%H:%M", time.gmtime()), os.getloadavg()[0]
    t0 = time.perf_counter()
    rows = []
    for P, grid, name in runs:
        rows += run_one(P, grid, name)
        print(f"{name}: done after {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    ended = time.strftime("%Y-%m-%dT%H:%M", time.gmtime())
    command = "python -m bench.recipes_table" + (f" --write {args.write}" if args.write else "")
    block = render(rows, started, ended, (before, os.getloadavg()[0]), command)
    print(block)
    if args.write:
        page = Path(args.write)
        write_text_atomic(page, replace_block(page.read_text(), block), "the docs page")


if __name__ == "__main__":
    main()
