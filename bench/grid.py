"""CAGNET's four families side by side (issue 36): 1D, 1.5D, 2D and 3D, each sparsity-oblivious
(CAGNET) and sparsity-aware, and Plexus's 3D (``plexus3d``, issue 45), measured on this
machine and projected to P = 1,024.

1. ``measured``: on WordNet (Debian's wordnet-base, ``bench.real_graphs``) and an R-MAT
   power-law graph, ``mpiexec -n P spmmgnn bench`` at P = 8, 12, 16 (oversubscribed on this
   machine's cores) runs every algorithm of the five families on METIS-vol parts: 1.5D at
   c = 2 (c = 3 at P = 12), 2D and 3D on the grid closest to a square / cube. Reported per
   run: ms per SpMM (f = 64, float32), the largest rank's bytes sent and the total (and of
   them the row layout's conversions, plexus3d's only), and the peers a rank exchanges rows
   with (the volume model's count from the same partition: distinct peers of each
   all-to-allv, and for the collective algorithms their rounds in one call).
2. ``model``: the alpha-beta model (``spmmgnn model``'s) on an R-MAT graph of 2^24
   (1.7 x 10^7; ``--scale``) vertices and edge factor 4 (contiguous blocks) under the
   ``ib-hdr`` preset,
   f = 128, from P = 4 to 1,024: per family the epoch time of a 2-layer GCN's SpMMs (2L
   calls in the row layout; oblivious2d/3d and plexus3d also in their kept layouts, the
   training step of ``train --grid-layout`` / ``--plexus-blocks``: ``spmmgnn model``'s
   kept rows), the P from which it is the fastest of all, and the
   memory model's largest rank (``spmmgnn model --memory``) against a 64 GB node holding 4
   ranks (16 GB per rank): the smallest P at which it fits.

    python -m bench.grid [--only measured model] [--quick] [--scale 24]
    python -m bench.grid --only model --graph-npy /tmp/s47/rmat-s24-e7 --out /tmp/grid

``--graph-npy STEM`` models a lean graph (``bench.large_graph``'s ``rmat_lean`` files,
memory-mapped, normalized in float32 by ``gcn_norm_pattern``) instead of generating the
R-MAT graph (whose int64 edge lists need many GB at 2^24); the run prints its peak resident
memory. ``--out DIR`` writes ``grid.{json,md}`` there instead of ``bench/results``.

Writes ``bench/results/grid.{json,md}`` (the JSON beside the Markdown, not committed).
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from bench import RESULTS, real_graphs
from spmmgnn.benchmark.harness import machine, now, run_mpi, spmmgnn_command, write_json
from spmmgnn.benchmark.tables import md_table, publish, where

FAMILIES = [("1D", "oblivious1d", "sparse1d"), ("1.5D", "oblivious15d", "sparse15d"),
            ("2D", "oblivious2d", "sparse2d"), ("3D", "oblivious3d", "sparse3d"),
            ("Plexus", "plexus3d")]
ALGORITHMS = [a for _, *names in FAMILIES for a in names]
# the training step in the kept layouts (train --grid-layout / --plexus-blocks, as CAGNET
# and Plexus train): spmmgnn model's rows (benchmark.costs.kept_rows)
KEPT = {"2D": "oblivious2d kept", "3D": "oblivious3d kept", "Plexus": "plexus3d kept"}
NODE_BYTES, RANKS_PER_NODE = 64 * 2**30, 4


def graphs(tmp: Path, quick: bool) -> dict[str, Path]:
    """name -> an .npz graph file the CLI loads (symmetric, unit weights)."""
    from spmmgnn.data.generators import rmat

    out = {}
    scale = 13 if quick else 16
    A = rmat(scale, 16, seed=1)
    out[f"rmat-{scale}"] = A
    try:
        out["wordnet"] = real_graphs.load("wordnet")
    except Exception as exc:  # no apt here: the R-MAT graph alone
        print(f"wordnet unavailable ({exc}); R-MAT only", flush=True)
    files = {}
    for name, A in out.items():
        A = sp.csr_array(A)
        path = tmp / f"{name}.npz"
        sp.save_npz(path, sp.csr_matrix(A))
        files[name] = path
    return files


def grid_flags(P: int) -> list[str]:
    return ["--replication", "1", "3" if P % 3 == 0 else "2"]


def measured(quick: bool) -> dict:
    """``spmmgnn bench`` at each P into one results file, then the table rows."""
    from spmmgnn.benchmark.costs import cached_layout
    from spmmgnn.benchmark.records import latest, read_records
    from spmmgnn.benchmark.volumes import predict
    from spmmgnn.data.loaders import load_graph
    from spmmgnn.grid import parse_grid

    Ps = [4, 8] if quick else [8, 12, 16]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        files = graphs(tmp, quick)
        results = tmp / "grid.jsonl"
        for P in Ps:
            t0 = time.perf_counter()
            run_mpi(P, [*spmmgnn_command(), "bench", "--quiet", "--threads", "1", "-o",
                        str(results), "--mode", "spmm", "-f", "64", "--repeat",
                        "3" if quick else "5", "--partitioner", "metis-vol", "--graph",
                        *map(str, files.values()), "--algorithm", *ALGORITHMS,
                        *grid_flags(P)])
            print(f"P={P}: {time.perf_counter() - t0:.0f} s", flush=True)
        records = [r for r in latest(read_records(str(results))) if r.get("mode") == "spmm"]
        names = {str(p): n for n, p in files.items()}
        layouts: dict = {}
        for r in records:
            if "error" in r:
                rows.append(dict(graph=names[r["graph"]], P=r["P"], algorithm=r["algorithm"],
                                 error=r["error"]))
                continue
            A = load_graph(r["graph"]).adj
            key = (r["graph"], r["P"] // r["c"])
            cache = layouts.setdefault(r["graph"], {})
            layout = cached_layout(cache, A, key[1], "metis-vol", r.get("seed", 0))
            shape = parse_grid(r["grid"]) if r.get("grid") else None
            vol = predict(r["algorithm"], layout, r["P"], r["c"], r["f"], 4, shape=shape)
            sent = np.asarray(r["per_rank"]["bytes_sent"], dtype=float)
            assert sent.tolist() == vol.sent.tolist(), (r["algorithm"], r["P"])
            rows.append(dict(graph=names[r["graph"]], n=r["n"], nnz=r["nnz"], P=r["P"],
                             algorithm=r["algorithm"], c=r["c"], grid=r.get("grid"),
                             ms=r["seconds"] * 1e3, max_mb=sent.max() / 1e6,
                             total_mb=sent.sum() / 1e6, peers=int(vol.messages.max()),
                             convert_mb=sum(r["per_rank"]["bytes_sent_convert"]) / 1e6))
    return dict(rows=rows, Ps=Ps)


def lean_graph(stem: str):
    """The GCN-normalized matrix of a lean graph (``bench/large_graph.py``'s ``rmat_lean``:
    ``STEM.indptr.npy`` int64, ``STEM.indices.npy`` int32, symmetric, no values), the two
    files memory-mapped and normalized in float32 (``gcn_norm_pattern``)."""
    from spmmgnn.data.normalize import gcn_norm_pattern

    indptr = np.load(f"{stem}.indptr.npy", mmap_mode="r", allow_pickle=False)
    indices = np.load(f"{stem}.indices.npy", mmap_mode="r", allow_pickle=False)
    return gcn_norm_pattern(indptr, indices)


def model(quick: bool, scale: int = 24, npy: str | None = None) -> dict:
    """The alpha-beta and memory models to P = 1,024 on a large R-MAT graph (2^scale, or
    the lean graph ``npy`` names, symmetric)."""
    from spmmgnn.benchmark import costs
    from spmmgnn.benchmark.memory import ModelShape, memory_rows
    from spmmgnn.benchmark.volumes import Layout
    from spmmgnn.data.generators import rmat
    from spmmgnn.data.normalize import normalize
    from spmmgnn.layout import Partition

    scale = 16 if quick else scale
    Ps = [4, 16, 64, 256, 1024] if not quick else [4, 16, 64]
    t0 = time.perf_counter()
    if npy:
        A, name = lean_graph(npy), f"{Path(npy).name} (lean .npy files, symmetric)"
    else:
        A, name = normalize(rmat(scale, 4, seed=1), "gcn"), f"R-MAT 2^{scale}, edge factor 4"
    print(f"{name}: n={A.shape[0]} nnz={A.nnz} in {time.perf_counter() - t0:.0f} s",
          flush=True)
    layouts = {k: Layout(A, Partition.contiguous(A.shape[0], k).offsets)
               for k in sorted({P // c for P in Ps for c in (1, 2, 4) if P % c == 0})}
    net = costs.NETWORKS["ib-hdr"]
    t0 = time.perf_counter()
    head = min(A.shape[0], 2**20)   # a principal block: X of 2^20 rows, not of n
    rate = costs.measure_rate(A[:head][:, :head], 128)
    m = costs.Machine(alpha=net.alpha, beta=net.beta, rate=rate)
    f, layers = 128, 2
    times = costs.predict_all(A, Ps, [1, 2, 4], ALGORITHMS, f, 4, m, 2 * layers,
                              layouts=layouts)
    times += costs.kept_rows(A, Ps, ALGORITHMS, f, 4, m, layers, layouts=layouts,
                             symmetric=True if npy else None)
    print(f"time model: {time.perf_counter() - t0:.0f} s", flush=True)
    t0 = time.perf_counter()
    shape = ModelShape(features=f, hidden=f, classes=16, layers=layers)
    mem = memory_rows(A, Ps, [1, 2, 4], ALGORITHMS, shape, layouts=layouts,
                      symmetric=True if npy else None)
    print(f"memory model: {time.perf_counter() - t0:.0f} s", flush=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(f"peak resident memory of the model run: {peak / 2**30:.2f} GiB", flush=True)
    return dict(graph=name, peak_rss_bytes=peak, n=int(A.shape[0]), nnz=int(A.nnz),
                preset="ib-hdr", network=net.source,
                rate=rate, f=f, layers=layers, Ps=Ps, times=times, memory=mem)


def _family(algorithm: str) -> str:
    return next(name for name, *names in FAMILIES if algorithm in names)


def render(data: dict) -> str:
    lines = ["# CAGNET's four families (1D, 1.5D, 2D, 3D; issue 36) and Plexus's 3D (issue 45)",
             "",
             f"`python -m bench.grid` on {where(data['machine'])} "
             f"({data['machine']['cores']} cores), {data['when']}; load before: "
             f"{data['load']}.", ""]
    if "measured" in data:
        meas = data["measured"]
        lines += ["## Measured", ""]
        if "when" in meas:   # the section's own run (the model may have run at another time)
            lines += [f"Run {meas['when']}, load before: {meas['load']}.", ""]
        lines += ["`mpiexec -n P spmmgnn bench --mode spmm -f 64 --partitioner metis-vol` "
                  "(float32, 1 thread per rank; P > 2 is oversubscribed on this machine, so "
                  "the times rank the algorithms' work and waiting, not a cluster's network). "
                  "Bytes are per SpMM, equal to the volume model rank by rank (checked by the "
                  "script); *peers*: the largest rank's message partners per call (sparse: "
                  "distinct peers summed over its exchanges; oblivious: its collective "
                  "rounds).", ""]
        for graph in sorted({r["graph"] for r in meas["rows"]}):
            rs = [r for r in meas["rows"] if r["graph"] == graph and "error" not in r]
            if not rs:
                continue
            lines += [f"### {graph} (n = {rs[0]['n']:,}, nnz = {rs[0]['nnz']:,})", ""]
            order = {a: i for i, a in enumerate(ALGORITHMS)}
            lines += md_table(
                ["P", "family", "algorithm", "grid", "ms / SpMM", "max MB sent", "total MB",
                 "of it convert", "peers"],
                [[r["P"], _family(r["algorithm"]), r["algorithm"], r["grid"] or f"c={r['c']}",
                  f"{r['ms']:.2f}", f"{r['max_mb']:.3f}", f"{r['total_mb']:.3f}",
                  f"{r.get('convert_mb', 0):.3f}", r["peers"]]
                 for r in sorted(rs, key=lambda r: (r["P"], order[r["algorithm"]], r["c"]))
                 if not (r["algorithm"].endswith("15d") and r["c"] == 1)],  # the 1D one
                spaced=True)
            lines.append("")
        bad = [r for r in meas["rows"] if "error" in r]
        lines += [f"- failed: {r['graph']} P={r['P']} {r['algorithm']}: {r['error']}"
                  for r in bad]
    if "model" in data:
        md = data["model"]
        lines += ["## Projected to P = 1,024", ""]
        if "when" in md:
            lines += [f"Run {md['when']}, load before: {md['load']}.", ""]
        lines += [f"`spmmgnn model`'s alpha-beta and memory models on "
                  f"{md.get('graph', 'R-MAT')} with n = "
                  f"{md['n']:,}, nnz = {md['nnz']:,} (GCN-normalized, contiguous blocks), "
                  f"preset `{md['preset']}` ({md['network']}), local rate "
                  f"{md['rate'] / 1e9:.2f} G non-zeros x columns / s measured here, "
                  f"f = {md['f']}, a {md['layers']}-layer GCN (epoch = "
                  f"{2 * md['layers']} SpMMs); memory: the largest rank training a GCN "
                  f"{md['f']} -> {md['f']} -> 16, against {NODE_BYTES // 2**30} GB per node "
                  f"with {RANKS_PER_NODE} ranks per node.", ""]
        best, table = {}, []
        for P in md["Ps"]:
            cells, rs = [], [r for r in md["times"] if r["P"] == P]
            for a in ALGORITHMS + list(KEPT.values()):
                mine = [r for r in rs if r["algorithm"] == a]
                t = min(mine, key=lambda r: r["epoch_seconds"]) if mine else None
                rows = "" if t is None or "row_step_seconds" not in t else \
                    f" / {t['row_step_seconds'] * 1e3:.1f}"
                cells.append("-" if t is None else f"{t['epoch_seconds'] * 1e3:.1f}{rows} "
                             f"({t['grid'] or 'c=' + str(t['c'])})")
            fast = min((r for r in rs if r["algorithm"] in ALGORITHMS),
                       key=lambda r: r["epoch_seconds"])
            best[P] = fast["algorithm"]
            table.append([P, *cells, fast["algorithm"]])
        lines += md_table(["P", *ALGORITHMS, *KEPT.values(), "fastest"], table, spaced=True)
        lines += ["", "ms per epoch (the grid or c of the fastest point of each algorithm): "
                  f"{2 * md['layers']} SpMMs in the row layout (*fastest*: of these); *kept*: "
                  "the training step of `train --grid-layout` / `--plexus-blocks` (`spmmgnn "
                  f"model`'s kept rows: {2 * md['layers'] - 1} SpMMs without conversions, the "
                  "dense products' gathers / reduce-scatters and the logits' conversion) / "
                  "the same SpMMs in the row layout, each converting; for the kept rows the "
                  "family table says from which P the kept step beats that.", ""]
        table = []
        for fam, *names in FAMILIES:
            for a in names + ([KEPT[fam]] if fam in KEPT else []):
                wins = [P for P in md["Ps"] if best[P] == a or any(
                    r["epoch_seconds"] < r["row_step_seconds"] for r in md["times"]
                    if r["P"] == P and r["algorithm"] == a and "row_step_seconds" in r)]
                fits = [P for P in md["Ps"] if min(
                    (r["total"] for r in md["memory"] if r["P"] == P
                     and r["algorithm"] == a), default=np.inf) <= NODE_BYTES / RANKS_PER_NODE]
                last = min((r["total"] for r in md["memory"]
                            if r["P"] == md["Ps"][-1] and r["algorithm"] == a), default=0)
                table.append([fam, a, wins[0] if wins else "never",
                              fits[0] if fits else "never", f"{last / 2**30:.2f}"])
        lines += md_table(["family", "algorithm",
                           "fastest of all from P (kept: beats its row step)",
                           f"fits a {NODE_BYTES // 2**30} GB node ({RANKS_PER_NODE} ranks) "
                           "from P", f"largest rank at P = {md['Ps'][-1]} (GiB)"], table,
                          spaced=True)
        lines.append("")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", choices=["measured", "model"],
                    default=["measured", "model"])
    ap.add_argument("--quick", action="store_true", help="small graphs, fewer P")
    ap.add_argument("--scale", type=int, default=24, help="the model's R-MAT: 2^scale vertices")
    ap.add_argument("--graph-npy", metavar="STEM",
                    help="the model's graph from STEM.indptr.npy / STEM.indices.npy (int64, "
                         "int32, symmetric, no values: large_graph.py's rmat_lean), "
                         "memory-mapped, instead of generating R-MAT 2^scale")
    ap.add_argument("--out", type=Path, default=RESULTS,
                    help="folder of grid.{json,md} (default bench/results)")
    args = ap.parse_args()
    load = Path("/proc/loadavg").read_text().split()[:3]
    data = dict(machine=machine(), when=now(), load=" ".join(load))
    name = "grid-quick" if args.quick else "grid"
    args.out.mkdir(parents=True, exist_ok=True)
    old = args.out / f"{name}.json"
    if old.exists():  # a section not run this time keeps its earlier results
        data = {**json.loads(old.read_text()), **data}
    for section, fn in (("measured", measured), ("model", model)):
        if section in args.only:
            data[section] = fn(args.quick, args.scale, args.graph_npy) \
                if section == "model" else fn(args.quick)
            data[section].update(when=data["when"], load=data["load"])
            write_json(old, data)
    publish(args.out / name, data, render)
    print(render(data))


if __name__ == "__main__":
    main()
