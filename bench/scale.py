"""Scale on one machine: a large generated graph trained at P = 4 from its HDF5 file, the
per-rank memory of the block-row path as P grows, and the start-up at many ranks.

1. ``spmmgnn datasets csbm --n N --degree D --parts 4`` writes a CSBM graph (default 2M
   vertices, ~34M non-zeros with the self loops, 64 features) laid out for 4 block rows;
   ``mpiexec -n 4 spmmgnn train --dataset FILE`` trains on it, each rank reading only its
   block row. Reported: the file's size and the time to write it, the wall time of the run,
   per-epoch time and breakdown, the peak resident memory of the largest rank.
2. Per-rank memory as P grows: ``tests/training/workers/memory_h5.py`` (peak traced memory of
   loading a block row as training does plus one SpMM) on a 400k-vertex banded graph at
   P = 2, 4, 8.
3. Start-up at P = 16 (oversubscribed on this machine's cores): the wall time of
   ``mpiexec -n 16 spmmgnn train --epochs 1`` on a small graph, against the in-run times.
4. The memory model against measurement: ``spmmgnn.benchmark.memory`` (what
   ``spmmgnn model --memory`` prints) beside the peak resident memory of two training steps
   (``tests/benchmark/workers/memory_train.py``) for every algorithm at P = 2, 4, 8, on a CSBM
   graph written for each number of block rows.

    python -m bench.scale [--n 2000000] [--degree 16] [--epochs 5] [--quick]
                          [--only large memory startup model]

Runs are sequential; writes ``bench/results/scale.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

from bench import RESULTS, ROOT
from spmmgnn.benchmark.harness import machine, run, run_mpi, spmmgnn_command
from spmmgnn.benchmark.tables import md_table, publish, where

SECTIONS = ("large", "memory", "startup", "model")
SPMMGNN = spmmgnn_command()


def large_run(tmp: Path, n: int, degree: float, epochs: int) -> dict:
    h5 = tmp / "large.h5"
    write_s = run([*SPMMGNN, "datasets", "csbm", "--out", str(h5), "--n", str(n), "--degree",
                   str(degree), "--parts", "4"]).seconds
    out = tmp / "large.json"
    proc = run_mpi(4, [*SPMMGNN, "train", "--dataset", str(h5), "--epochs", str(epochs),
                       "--eval-every", "0", "--json", str(out)])
    wall = proc.seconds
    r = json.loads(out.read_text())
    base = run([sys.executable, "-c", "import spmmgnn.training, spmmgnn.cli, h5py\n"
                "from spmmgnn.runtime.machine import peak_rss_bytes\nprint(peak_rss_bytes())"])
    return dict(n=r["n"], nnz=r["nnz"], features=r["num_features"], P=4,
                baseline_rss_bytes=int(base.stdout.split()[-1]),
                file_bytes=h5.stat().st_size, write_seconds=write_s, wall_seconds=wall,
                epochs=epochs, first_epoch_seconds=r["first_epoch_seconds"],
                epoch_seconds=r["epoch_seconds"], breakdown=r["breakdown"],
                steady_epoch_wall_seconds=r["steady_epoch_wall_seconds"],
                peak_rss_bytes=[x["peak_rss_bytes"] for x in r["ranks"]],
                threads_per_rank=r.get("threads_per_rank"), done=proc.stdout.strip())


def memory_vs_p(tmp: Path, n: int) -> list[dict]:
    from tests.training.test_scale import _banded_graph

    rows = []
    for P in (2, 4, 8):
        h5 = tmp / f"banded{P}.h5"
        _banded_graph(h5, n, P)
        out = tmp / f"mem{P}.json"
        worker = ROOT / "tests" / "training" / "workers" / "memory_h5.py"
        run_mpi(P, [sys.executable, str(worker), str(out), str(h5)],
                env=dict(SPMMGNN_THREADS="1"))
        peaks = json.loads(out.read_text())["peak"]
        rows.append(dict(P=P, n=n, max_peak_bytes=max(peaks), min_peak_bytes=min(peaks)))
    return rows


def startup(tmp: Path, P: int = 16) -> dict:
    out = tmp / "startup.json"
    wall = run_mpi(P, [*SPMMGNN, "train", "--csbm-n", "20000", "--epochs", "1", "--json",
                       str(out), "--quiet"]).seconds
    r = json.loads(out.read_text())
    hello = run_mpi(P, [sys.executable, "-c",
                        "from mpi4py import MPI; MPI.COMM_WORLD.Barrier()"]).seconds
    imports = run_mpi(P, [sys.executable, "-c",
                          "import spmmgnn.training, spmmgnn.cli; from mpi4py import MPI; "
                          "MPI.COMM_WORLD.Barrier()"]).seconds
    return dict(P=P, wall_seconds=wall, mpi_hello_seconds=hello, imports_seconds=imports,
                train_loop_seconds=r["wall_seconds"], first_epoch_seconds=r["first_epoch_seconds"])


MODEL_CASES = [(P, a, 1) for P in (2, 4, 8) for a in
               ("sparse1d", "oblivious1d", "prepost1d", "featureparallel")]
MODEL_CASES += [(P, a, 2) for P in (2, 4, 8) for a in ("sparse15d", "oblivious15d")]
MEASURE_ENV = dict(SPMMGNN_THREADS="1", MALLOC_MMAP_THRESHOLD_="65536",
                   SPMMGNN_KERNEL="unrolled", SPMMGNN_KERNEL_T="transpose")


def _measured_row(tmp: Path, path: Path, layout, algorithm: str, P: int, c: int, shape,
                  symmetric: bool, **extra) -> dict:
    """Predict the memory of training ``algorithm`` on the graph file ``path`` and measure it
    with ``tests/benchmark/workers/memory_train.py`` (the high-water mark of every rank)."""
    from spmmgnn.benchmark.memory import COMPONENTS, predict_memory

    m = predict_memory(algorithm, layout, P, c, shape, symmetric=symmetric)
    out = tmp / "model.json"
    worker = ROOT / "tests" / "benchmark" / "workers" / "memory_train.py"
    run_mpi(P, [sys.executable, str(worker), str(out), str(path), algorithm, str(c),
                str(shape.hidden)], env=MEASURE_ENV)
    r = json.loads(out.read_text())
    ratio = np.array(r["train"]) / m["total"]
    worst = int(np.argmax(m["total"]))
    return dict(P=P, c=c, algorithm=algorithm, features=shape.features, **extra,
                predicted=m["total"].tolist(), measured=r["train"], load_peak=r["load"],
                held_after_load=r["held"],
                components={key: int(m[key][worst]) for key in COMPONENTS},
                ratio_range=[float(ratio.min()), float(ratio.max())])


def model_vs_measured(tmp: Path, n: int, features: int, hidden: int = 64) -> list[dict]:
    from spmmgnn.benchmark.memory import ModelShape
    from spmmgnn.benchmark.volumes import Layout
    from spmmgnn.data.h5graph import read_block_row, read_offsets
    from spmmgnn.data.normalize import normalize

    files, rows = {}, []
    for P, algorithm, c in MODEL_CASES:
        k = P // c
        if k not in files:
            files[k] = tmp / f"model{k}.h5"
            run([*SPMMGNN, "datasets", "csbm", "--out", str(files[k]), "--n", str(n),
                 "--features", str(features), "--parts", str(k)])
        block = read_block_row(files[k])
        A = normalize(block.adj, "gcn")
        shape = ModelShape(features=features, hidden=hidden, classes=block.num_classes)
        rows.append(_measured_row(tmp, files[k], Layout(A, read_offsets(files[k])), algorithm,
                                  P, c, shape, symmetric=(A != A.T).nnz == 0, n=n))
        print(f"model P={P} c={c} {algorithm}: ratio {rows[-1]['ratio_range']}", flush=True)
    return rows + directed_model(tmp, features, hidden)


def directed_model(tmp: Path, features: int, hidden: int, scale: int = 17,
                   P: int = 4) -> list[dict]:
    """The model on a directed R-MAT graph (A != A^T: transposes and the backward's own
    exchange), contiguous block rows, the four 1D algorithms."""
    from spmmgnn.benchmark.memory import ModelShape
    from spmmgnn.benchmark.volumes import Layout
    from spmmgnn.data.generators import rmat
    from spmmgnn.data.h5graph import write_graph
    from spmmgnn.data.normalize import normalize
    from spmmgnn.layout import Partition

    A = rmat(scale, 16, seed=1, symmetric=False)
    n = A.shape[0]
    rng = np.random.default_rng(0)
    path = tmp / "rmat.h5"
    offsets = Partition.contiguous(n, P).offsets
    write_graph(path, A, offsets=offsets, labels=rng.integers(0, 6, n), directed=True,
                features=rng.standard_normal((n, features)).astype(np.float32))
    Ah = normalize(A, "gcn")
    rows = []
    for algorithm in ("sparse1d", "oblivious1d", "prepost1d", "featureparallel"):
        rows.append(_measured_row(tmp, path, Layout(Ah, offsets), algorithm, P, 1,
                                  ModelShape(features=features, hidden=hidden, classes=6),
                                  symmetric=False, n=n, graph=f"rmat:scale={scale} directed"))
        print(f"model directed {algorithm}: ratio {rows[-1]['ratio_range']}", flush=True)
    return rows


def render(res: dict) -> str:
    L = res["large"]
    gib = 2**30
    lines = [
        "# Scale on one machine", "",
        f"`{res.get('command', 'python -m bench.scale')}` on {res['machine']['cores']} cores "
        f"({where(res['machine'])}).", "",
        "## A large graph trained from its HDF5 file at P = 4", "",
        f"CSBM, n = {L['n']:,}, nnz = {L['nnz']:,} (with self loops), {L['features']} "
        f"features, written by `spmmgnn datasets csbm --parts 4` in {L['write_seconds']:.0f} s "
        f"({L['file_bytes'] / gib:.2f} GiB); `mpiexec -n 4 spmmgnn train --dataset FILE "
        f"--epochs {L['epochs']} --eval-every 0`, {L['threads_per_rank']} thread(s) per rank "
        "(oversubscribed: 4 ranks on 2 cores), each rank reading only its block row.", ""]
    lines += md_table(["quantity", "value"], [
        [f"wall time of the run (start-up, load, {L['epochs']} epochs)",
         f"{L['wall_seconds']:.1f} s"],
        ["first epoch (kernel set-up: compile or load, time the variants)",
         f"{L['first_epoch_seconds']:.2f} s"],
        ["steady epoch, wall", f"{L['steady_epoch_wall_seconds']:.2f} s"],
        ["training step (rank 0)", f"{L['epoch_seconds']:.2f} s"],
        *([f"- {k}", f"{v:.3f} s"] for k, v in L["breakdown"].items()),
        ["peak resident memory, largest rank", f"{max(L['peak_rss_bytes']) / gib:.2f} GiB"],
        ["peak resident memory, all ranks", f"{sum(L['peak_rss_bytes']) / gib:.2f} GiB"],
        ["of which per rank: Python with torch, numba, scipy, h5py loaded",
         f"{L['baseline_rss_bytes'] / gib:.2f} GiB"]], "lr")
    lines += ["", "## Per-rank memory as P grows (HDF5 block-row path)", "",
              "Peak traced memory (numpy/h5py allocations, imports excluded) of loading a block "
              f"row as `spmmgnn train` does plus one SpMM, banded graph of "
              f"{res['memory'][0]['n']:,} vertices (ghosts only near block boundaries):", ""]
    base = res["memory"][0]["max_peak_bytes"]
    lines += md_table(["P", "largest rank", "smallest rank", "largest / P = 2's"],
                      [[m["P"], f"{m['max_peak_bytes'] / 2**20:.1f} MiB",
                        f"{m['min_peak_bytes'] / 2**20:.1f} MiB",
                        f"{m['max_peak_bytes'] / base:.2f}"] for m in res["memory"]], "rrrr")
    S = res["startup"]
    lines += ["", f"## Start-up at P = {S['P']} (oversubscribed)", ""]
    lines += md_table(["step", "seconds"], [
        [f"`mpiexec -n {S['P']} spmmgnn train --csbm-n 20000 --epochs 1`, whole",
         f"{S['wall_seconds']:.1f}"],
        ["`mpiexec` + MPI init + a barrier, bare Python", f"{S['mpi_hello_seconds']:.1f}"],
        ["the same after importing spmmgnn.training and the CLI (torch, numba)",
         f"{S['imports_seconds']:.1f}"],
        ["the training loop (1 epoch and its evaluation)", f"{S['train_loop_seconds']:.1f}"]],
        "lr")
    lines += ["", "The rest of the whole run is generating the graph on rank 0, distributing it "
              "and building the operator.", ""]
    if res.get("model"):
        M = res["model"]
        mib = 2**20
        lines += ["## The memory model against measurement", "",
                  f"CSBM, n = {M[0]['n']:,}, {M[0]['features']} features, GCN "
                  f"{M[0]['features']} -> 64 -> classes, float32, written for each number of "
                  "block rows; `spmmgnn.benchmark.memory` (`spmmgnn model --memory`) beside "
                  "the high-water mark of each rank's resident memory over two training "
                  "steps, above its resident size before loading "
                  "(`tests/benchmark/workers/memory_train.py`: glibc's mmap threshold fixed "
                  "so freed "
                  "arrays leave, kernels fixed to `unrolled` / `transpose`). The components "
                  "are the largest rank's; measured / predicted over all ranks. The last "
                  f"rows: a directed R-MAT graph ({M[-1]['n']:,} vertices, power-law "
                  "degrees, A != A^T, so the transposes and the backward's exchange "
                  "count), contiguous block rows.", ""]
        parts = ("matrix", "halo", "buffers", "features", "activations", "gradients")
        lines += md_table(
            ["P", "c", "algorithm", *parts, "predicted", "measured", "measured / predicted",
             "load peak"],
            [[r["P"], r["c"], r["algorithm"] + (f" ({r['graph']})" if "graph" in r else ""),
              *(f"{r['components'][k] / mib:.1f}" for k in parts),
              f"{max(r['predicted']) / mib:.1f}", f"{max(r['measured']) / mib:.1f}",
              f"{r['ratio_range'][0]:.3f}-{r['ratio_range'][1]:.3f}",
              f"{max(r['load_peak']) / mib:.1f}"] for r in M], "rrl" + "r" * 10)
        lines += ["", "MiB per rank; the weights and Adam's moments are below 0.1 MiB here. "
                  "*load peak*: the high-water mark while reading the block row and building "
                  "the operator and the trainer (not modelled).", ""]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2_000_000)
    ap.add_argument("--degree", type=float, default=16.0)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--memory-n", type=int, default=400_000)
    ap.add_argument("--model-n", type=int, default=200_000)
    ap.add_argument("--model-features", type=int, default=128)
    ap.add_argument("--only", nargs="+", choices=SECTIONS,
                    help="re-run these sections, keep the others from the results file")
    ap.add_argument("--quick", action="store_true", help="small sizes, to try the script")
    args = ap.parse_args()
    if args.quick:
        args.n, args.memory_n, args.model_n, args.epochs = 50_000, 50_000, 50_000, 2
    stem = "scale-quick" if args.quick else "scale"
    res = {}
    if args.only and (RESULTS / f"{stem}.json").exists():
        res = json.loads((RESULTS / f"{stem}.json").read_text())
    sections = dict(large=lambda t: large_run(t, args.n, args.degree, args.epochs),
                    memory=lambda t: memory_vs_p(t, args.memory_n),
                    startup=startup,
                    model=lambda t: model_vs_measured(t, args.model_n, args.model_features))
    with tempfile.TemporaryDirectory(prefix="spmmgnn-scale-") as d:
        res["machine"] = machine()
        res["command"] = ("python -m bench.scale " + " ".join(sys.argv[1:])).strip()
        for name in args.only or SECTIONS:
            res[name] = sections[name](Path(d))
    publish(RESULTS / stem, res, render)
    print(render(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
