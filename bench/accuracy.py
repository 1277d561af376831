"""Accuracy with compressed exchanges: float32 vs int2, with and without label propagation.

Like SuperGCN's accuracy table: each configuration is a full ``mpiexec -n P spmmgnn train``
run (the same seed and split), and the test accuracy at the best validation epoch is
reported, on the default synthetic CSBM graph and on WordNet (if ``bench/results/wordnet.h5``
exists or Debian's wordnet-base is installed to build it).

    python bench/accuracy.py [-P 4] [--json bench/results/accuracy.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
from pathlib import Path

from wordnet_accuracy import spmmgnn_cmd

from common import RESULTS, write_json

CONFIGS = [("float32", "none", 0.0), ("float32 + LP", "none", None),
           ("int2", "int2", 0.0), ("int2 + LP", "int2", None)]


def run(P: int, dataset_flags: list[str], codec: str, lp: float, extra: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.json"
        cmd = spmmgnn_cmd(P, "train", *dataset_flags, "--codec", codec,
                          "--label-propagation", str(lp), "--quiet", "--threads", "1",
                          "--json", str(out), *extra)
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
        r = json.loads(out.read_text())
    return dict(best_test_acc=r["best"]["test_acc"], best_epoch=r["best"]["epoch"],
                final_test_acc=r["final"]["test_acc"], epoch_seconds=r["epoch_seconds"],
                bytes_sent=sum(x["bytes_sent"] for x in r["ranks"]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-P", type=int, default=4)
    ap.add_argument("--lp-rate", type=float, default=0.3)
    ap.add_argument("--wordnet", default=str(RESULTS / "wordnet.h5"))
    ap.add_argument("--json", default=str(RESULTS / "accuracy.json"))
    args = ap.parse_args()
    datasets = {"csbm (default)": (["--no-cache"], [])}
    wn = Path(args.wordnet)
    if not wn.exists():
        build = subprocess.run(spmmgnn_cmd(None, "datasets", "wordnet", "--out", str(wn)),
                               capture_output=True, text=True)
        if build.returncode != 0:
            print(f"WordNet skipped: {build.stderr.strip().splitlines()[-1:]}")
    if wn.exists():
        datasets["wordnet"] = (["--dataset", str(wn), "--no-cache"],
                               ["--hidden", "128", "--epochs", "200", "--model", "sage"])
    rows = []
    for name, (flags, extra) in datasets.items():
        for label, codec, lp in CONFIGS:
            rate = args.lp_rate if lp is None else lp
            r = run(args.P, flags, codec, rate, extra)
            r.update(dataset=name, config=label, codec=codec, label_propagation=rate, P=args.P)
            rows.append(r)
            print(f"{name:>15} {label:>13}: test {r['best_test_acc']:.4f} (epoch "
                  f"{r['best_epoch']}), {r['epoch_seconds'] * 1e3:.0f} ms/epoch, "
                  f"{r['bytes_sent'] / 1e6:.1f} MB sent", flush=True)
    table = ["| dataset | " + " | ".join(c[0] for c in CONFIGS) + " |",
             "|---|" + "---|" * len(CONFIGS)]
    for name in datasets:
        accs = [next(r for r in rows if r["dataset"] == name and r["config"] == c[0])
                for c in CONFIGS]
        table.append(f"| {name} | " + " | ".join(f"{a['best_test_acc'] * 100:.2f}"
                                                 for a in accs) + " |")
    print("\n".join(table))
    path = write_json(args.json, dict(P=args.P, rows=rows, markdown="\n".join(table)))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
