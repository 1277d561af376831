"""Accuracy of GCN / GraphSAGE on WordNet 3.0 (Debian's wordnet-base), trained over MPI.

Converts WordNet to the project's HDF5 format once (``spmmgnn datasets wordnet``: synsets
linked by pointers, TF-IDF-SVD features of the definitions, 45 lexicographer classes,
seeded 60/20/20 split) and trains with ``mpiexec -n P spmmgnn train``; prints and writes the
test accuracy at the best validation epoch. Needs ``apt-get install wordnet-base``.

    python -m bench.wordnet_accuracy                 # P=2, GCN and SAGE, 200 epochs
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bench import RESULTS
from spmmgnn.benchmark.harness import LaunchError, run, run_mpi, spmmgnn_command, write_json


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-P", type=int, default=2, help="ranks")
    p.add_argument("--models", nargs="+", default=["gcn", "sage"])
    p.add_argument("--epochs", type=int, default=200)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--file", default=str(RESULTS / "wordnet.h5"))
    p.add_argument("--out", default=str(RESULTS / "wordnet_accuracy.json"))
    args = p.parse_args()
    h5 = Path(args.file)
    if not h5.exists():
        try:
            run([*spmmgnn_command(), "datasets", "wordnet", "--out", str(h5), "--parts",
                 str(args.P)])
        except LaunchError as exc:   # no wordnet-base: the command's own error line
            raise SystemExit(str(exc).strip().splitlines()[-1]) from None
    rows = []
    for model in args.models:
        out = h5.with_name(f"wordnet_{model}.json")
        run_mpi(args.P, [*spmmgnn_command(), "train", "--dataset", str(h5), "--model", model,
                         "--epochs", str(args.epochs), "--hidden", str(args.hidden),
                         "--layers", str(args.layers), "--json", str(out), "--quiet"])
        r = json.loads(out.read_text())
        row = dict(model=model, P=args.P, epochs=args.epochs, hidden=args.hidden,
                   layers=args.layers, best=r["best"], final=r["final"],
                   epoch_seconds=r["epoch_seconds"], wall_seconds=r["wall_seconds"])
        rows.append(row)
        print(f"{model}: test accuracy {r['best']['test_acc']:.4f} at best val "
              f"{r['best']['val_acc']:.4f} (epoch {r['best']['epoch']}); final test "
              f"{r['final']['test_acc']:.4f}; {r['epoch_seconds'] * 1e3:.0f} ms/epoch",
              flush=True)
    write_json(args.out, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
