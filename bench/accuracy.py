"""Accuracy with compressed exchanges: float32 vs int2, with and without label propagation.

Like SuperGCN's accuracy table: each configuration is a full ``mpiexec -n P spmmgnn train``
run (the same seed and split), and the test accuracy at the best validation epoch is
reported, on the default synthetic CSBM graph and on WordNet (if ``bench/results/wordnet.h5``
exists or Debian's wordnet-base is installed to build it).

    python -m bench.accuracy [-P 4] [--json bench/results/accuracy.json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from bench import RESULTS
from spmmgnn.benchmark.harness import (
    LaunchError,
    machine,
    run,
    run_mpi,
    spmmgnn_command,
    write_json,
)
from spmmgnn.benchmark.tables import md_table

CONFIGS = [("float32", "none", 0.0), ("float32 + LP", "none", None),
           ("int2", "int2", 0.0), ("int2 + LP", "int2", None)]


def train(P: int, dataset_flags: list[str], codec: str, lp: float, extra: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.json"
        run_mpi(P, [*spmmgnn_command(), "train", *dataset_flags, "--codec", codec,
                    "--label-propagation", str(lp), "--quiet", "--threads", "1", "--json",
                    str(out), *extra])
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
        try:
            run([*spmmgnn_command(), "datasets", "wordnet", "--out", str(wn)])
        except LaunchError as exc:
            print(f"WordNet skipped: {str(exc).strip().splitlines()[-1:]}")
    if wn.exists():
        datasets["wordnet"] = (["--dataset", str(wn), "--no-cache"],
                               ["--hidden", "128", "--epochs", "200", "--model", "sage"])
    rows = []
    for name, (flags, extra) in datasets.items():
        for label, codec, lp in CONFIGS:
            rate = args.lp_rate if lp is None else lp
            r = train(args.P, flags, codec, rate, extra)
            r.update(dataset=name, config=label, codec=codec, label_propagation=rate, P=args.P)
            rows.append(r)
            print(f"{name:>15} {label:>13}: test {r['best_test_acc']:.4f} (epoch "
                  f"{r['best_epoch']}), {r['epoch_seconds'] * 1e3:.0f} ms/epoch, "
                  f"{r['bytes_sent'] / 1e6:.1f} MB sent", flush=True)
    table = md_table(["dataset", *(c[0] for c in CONFIGS)],
                     [[name, *(f"{a['best_test_acc'] * 100:.2f}" for a in
                               (next(r for r in rows if r["dataset"] == name
                                     and r["config"] == c[0]) for c in CONFIGS))]
                      for name in datasets])
    print("\n".join(table))
    path = write_json(args.json, dict(machine=machine(), P=args.P, rows=rows,
                                      markdown="\n".join(table)))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
