"""Delayed remote aggregates against the exact run (like DistGNN's Table 5): final and
best-validation test accuracy, bytes and epoch time of sparse1d training exact (cd-0), with
``--staleness R`` (cd-R, local and delayed backward) and with ``--drop-remote`` (0c), at each
P, same graph, same seed, on a random partition (the most remote edges). Graphs: the default
CSBM, a harder CSBM (weaker features, fewer edges inside a class) and WordNet with GraphSAGE
(DistGNN's model; needs Debian's wordnet-base). Writes JSON and a Markdown table.

    python -m bench.delayed -P 2 4 --epochs 200 --staleness 5
    python -m bench.delayed -P 2 4 --graphs wordnet-metis --out bench/results/delayed-metis
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from bench import RESULTS
from spmmgnn.benchmark.harness import machine, run, run_mpi, spmmgnn_command
from spmmgnn.benchmark.tables import md_table, publish


def train(P: int, flags: list[str], common: list[str]) -> dict:
    """One ``spmmgnn train`` run on P ranks; its ``--json`` summary."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run.json"
        run_mpi(P, [*spmmgnn_command(), "train", *common, *flags, "--quiet", "--json",
                    str(out)])
        return json.loads(out.read_text())


GRAPHS = {
    "csbm": "CSBM n = 20,000 (default), GCN, hidden 64",
    "csbm-hard": "CSBM n = 20,000, signal 0.5, homophily 0.35, GCN, hidden 64",
    "wordnet": "WordNet synsets (116,650), GraphSAGE-mean, hidden 128",
    "wordnet-metis": "the same on a metis-vol partition (few remote edges, as DistGNN's "
                     "min-cut partitions)",
}


def graph_flags(graph: str, P: int, tmp: Path) -> list[str]:
    """Training flags of one graph at P ranks (WordNet: an HDF5 file laid out for P)."""
    csbm = ["--csbm-n", "20000", "--hidden", "64", "--partitioner", "random"]
    if graph == "csbm":
        return csbm
    if graph == "csbm-hard":
        return [*csbm, "--csbm-signal", "0.5", "--csbm-homophily", "0.35"]
    method = "metis-vol" if graph == "wordnet-metis" else "random"
    h5 = tmp / f"wordnet-{method}-{P}.h5"
    if not h5.exists():
        run([*spmmgnn_command(), "datasets", "wordnet", "--out", str(h5), "--parts", str(P),
             "--partitioner", method])
    return ["--dataset", str(h5), "--model", "sage", "--hidden", "128"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-P", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--epochs", type=int, default=200)
    ap.add_argument("--staleness", type=int, default=5)
    ap.add_argument("--graphs", nargs="+", choices=sorted(GRAPHS),
                    default=["csbm", "csbm-hard", "wordnet"])
    ap.add_argument("--out", default=str(RESULTS / "delayed"))
    args = ap.parse_args()
    r = str(args.staleness)
    modes = [("cd-0 (exact)", []),
             (f"cd-{r}, local backward", ["--staleness", r]),
             (f"cd-{r}, delayed backward", ["--staleness", r, "--delayed-backward", "delayed"]),
             ("0c", ["--drop-remote"])]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for graph in args.graphs:
            for P in args.P:
                common = ["--epochs", str(args.epochs), "--algorithm", "sparse1d",
                          *graph_flags(graph, P, Path(tmp))]
                for label, flags in modes:
                    s = train(P, flags, common)
                    rows.append(dict(
                        graph=graph, P=P, mode=label, flags=flags,
                        final_test=s["final"]["test_acc"], final_epoch=s["final"]["epoch"],
                        best_test=s["best"]["test_acc"], best_epoch=s["best"]["epoch"],
                        diverged_at=s.get("diverged_at"),
                        bytes_per_epoch=sum(q["train_bytes_per_epoch"] for q in s["ranks"]),
                        ms_per_epoch=1e3 * s["epoch_seconds"],
                        breakdown_ms={k: 1e3 * v for k, v in s["breakdown"].items()}))
                    print(f"{graph} P={P} {label:26s} final {rows[-1]['final_test']:.4f} "
                          f"best-val {rows[-1]['best_test']:.4f}  "
                          f"{rows[-1]['ms_per_epoch']:.1f} ms/epoch", flush=True)
    publish(args.out, dict(machine=machine(), args=vars(args), rows=rows), render)


def render(data: dict) -> str:
    args = data["args"]
    lines = [f"{args['epochs']} epochs, sparse1d, same seed, random partitions (many cut edges) "
             "unless the graph says otherwise. "
             "Test accuracy at the final epoch and at the best-validation epoch (evaluation "
             "uses the exact operator); time per epoch excludes epoch 1 (one run each, 2 "
             "cores: noisy); bytes are all ranks' bytes sent per training step (evaluation's "
             "exact products not included). Graphs:", ""]
    lines += [f"- `{g}`: {GRAPHS[g]}" for g in args["graphs"]] + [""]
    lines += md_table(["graph", "P", "mode", "final test acc", "best-val test acc (epoch)",
                       "MB sent / epoch", "ms / epoch", "exchange ms", "all-reduce ms"],
                      [[row["graph"], row["P"], row["mode"], f"{row['final_test']:.4f}",
                        f"{row['best_test']:.4f} ({row['best_epoch']})",
                        f"{row['bytes_per_epoch'] / 1e6:.3f}", f"{row['ms_per_epoch']:.1f}",
                        f"{row['breakdown_ms'].get('exchange', 0):.1f}",
                        f"{row['breakdown_ms'].get('allreduce', 0):.1f}"]
                       for row in data["rows"]], "lrlrrrrrr")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
