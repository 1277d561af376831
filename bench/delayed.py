"""Delayed remote aggregates against the exact run (like DistGNN's Table 5): accuracy and
epoch time of sparse1d training exact (cd-0), with ``--staleness R`` (cd-R) and with
``--drop-remote`` (0c), at each P, same graph, same seed. Writes JSON and a Markdown table.

    python bench/delayed.py -P 2 4 --epochs 200 --staleness 5
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import RESULTS, machine, write_json  # noqa: E402
from spmmgnn.atomic import write_text_atomic  # noqa: E402


def run(P: int, flags: list[str], common: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run.json"
        cmd = [str(Path(sys.executable).parent / "mpiexec"), "-n", str(P), sys.executable, "-m",
               "spmmgnn.cli", "train", *common, *flags, "--quiet", "--json", str(out)]
        subprocess.run(cmd, check=True, capture_output=True, text=True)
        return json.loads(out.read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-P", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--epochs", type=int, default=200)
    ap.add_argument("--staleness", type=int, default=5)
    ap.add_argument("--csbm-n", type=int, default=20000)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--out", default=str(RESULTS / "delayed"))
    args = ap.parse_args()
    common = ["--epochs", str(args.epochs), "--csbm-n", str(args.csbm_n), "--hidden",
              str(args.hidden), "--algorithm", "sparse1d", "--partitioner", "random"]
    modes = [("cd-0 (exact)", []), (f"cd-{args.staleness}", ["--staleness", str(args.staleness)]),
             ("0c", ["--drop-remote"])]
    rows = []
    for P in args.P:
        for label, flags in modes:
            r = run(P, flags, common)
            s = r
            rows.append(dict(P=P, mode=label, flags=flags, test_acc=s["best"]["test_acc"],
                             val_acc=s["best"]["val_acc"], best_epoch=s["best"]["epoch"],
                             ms_per_epoch=1e3 * s["epoch_seconds"],
                             breakdown_ms={k: 1e3 * v for k, v in s["breakdown"].items()}))
            print(f"P={P} {label:14s} test {rows[-1]['test_acc']:.4f}  "
                  f"{rows[-1]['ms_per_epoch']:.1f} ms/epoch", flush=True)
    write_json(Path(args.out).with_suffix(".json"),
               dict(machine=machine(), args=vars(args), rows=rows))
    lines = [f"CSBM n = {args.csbm_n:,}, GCN 2 layers, hidden {args.hidden}, {args.epochs} "
             "epochs, sparse1d on a random partition (many cut edges), test accuracy at the "
             "best validation epoch; time per epoch excludes epoch 1.", "",
             "| P | mode | test acc | ms / epoch | exchange ms | all-reduce ms |",
             "|---:|---|---:|---:|---:|---:|"]
    for r in rows:
        b = r["breakdown_ms"]
        lines.append(f"| {r['P']} | {r['mode']} | {r['test_acc']:.4f} | "
                     f"{r['ms_per_epoch']:.1f} | {b.get('exchange', 0):.1f} | "
                     f"{b.get('allreduce', 0):.1f} |")
    write_text_atomic(Path(args.out).with_suffix(".md"), "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
