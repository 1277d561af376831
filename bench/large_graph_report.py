"""``bench/results/large-graph.md`` from the JSON rows of ``bench/large_graph.py``: each
measured row next to ``partitioners.estimate``'s memory and time estimate.

    python bench/large_graph_report.py ROWS.json [ROWS.json ...] --out bench/results/large-graph.md
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from spmmgnn.partitioners.estimate import estimate  # noqa: E402

HEAD = ("| graph | n | nnz | k | method | seconds | peak GB | total volume | max send | "
        "load imbalance | estimate: peak GB, seconds | load |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")


def _row(r: dict, n: int, nnz: int) -> str:
    est = estimate(r["method"], n, nnz, r["k"])
    est_cell = f"{est.peak_bytes / 1e9:.1f}, {est.seconds:,.0f}"
    if r.get("timed_out") or r.get("failed"):
        why = "timed out" if r.get("timed_out") else f"failed: {r['failed']}"
        return (f"| {r['graph']} | {n:,} | {nnz:,} | {r['k']} | {r['method']} | "
                f"{why} after {r['seconds']:.0f} s {r.get('note', '')} | | | | | {est_cell} | "
                f"{r.get('load', 0):.1f} |")
    return (f"| {r['graph']} | {n:,} | {nnz:,} | {r['k']} | {r.get('resolved', r['method'])} | "
            f"{r['seconds']:.1f} | {r['peak_rss_mib'] * 2**20 / 1e9:.2f} | "
            f"{r['total_volume']:,} | {r['max_send']:,} | {r['load_imbalance']:.1%} | "
            f"{est_cell} | {r.get('load', 0):.1f} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rows", nargs="+")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    lines, writes = [HEAD], []
    for path in args.rows:
        rows = json.loads(Path(path).read_text())["rows"]
        size = {r["graph"]: (r["n"], r["nnz"]) for r in rows if "n" in r}
        for r in rows:
            n, nnz = size.get(r["graph"], (r.get("n", 0), r.get("nnz", 0)))
            if r["method"] == "write":
                writes.append(
                    f"| {r['graph']} | {r['k']} | {r['write_method']} | "
                    f"{r['write_seconds']:.1f} | {r['write_peak_rss_mib'] * 2**20 / 1e9:.2f} | "
                    f"{r.get('h5_mib', 0):,.0f} | {r.get('read_ok')} |")
            else:
                lines.append(_row(r, n, nnz))
    text = "\n".join(lines) + "\n"
    if writes:
        text += ("\nThe write (`spmmgnn datasets convert --parts k`: read, partition, metrics, "
                 "relabel, write the HDF5 file), then every block row read back on its own:\n\n"
                 "| graph | k | partitioner | seconds | peak GB | file MiB | read back ok |\n"
                 "| --- | --- | --- | --- | --- | --- | --- |\n" + "\n".join(writes) + "\n")
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
