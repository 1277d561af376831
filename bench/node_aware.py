"""Node-aware exchanges (issue 37): the bytes that cross between nodes, flat vs node-aware, and
the two-tier model's projection to P = 1,024.

1. ``volumes``: on WordNet (Debian's wordnet-base, ``bench.real_graphs``) and an R-MAT power-law
   graph, at P = 8, 16, 32 with 2, 4 and 8 ranks per node (consecutive ranks), the volume
   model's inter-node bytes per SpMM (f = 64, float32) of ``sparse1d``, ``sparse15d`` (c = 2)
   and ``sparse2d`` (the grid closest to a square), flat and node-aware, on a flat METIS-vol
   partition into P parts and on the two-level one (``twolevel:metis-vol``: the nodes first,
   then each node's ranks). Byte counts: they come from the partition alone.
2. ``checked``: a few of them run for real (``mpiexec -n P spmmgnn bench --mode spmm
   --exchange flat node --ranks-per-node K``, oversubscribed on this machine): the counted
   bytes per rank and tier equal the model's (asserted), and the ms per SpMM are reported
   (every rank shares this machine's memory, so "inter-node" is simulated: the times show
   the cost of the extra legs, not a network's).
3. ``model``: the two-tier alpha-beta model (``spmmgnn model --ranks-per-node``) on an R-MAT
   graph of 2^20 vertices (contiguous blocks), preset ``ib-hdr`` between nodes and nominal
   shared memory inside, f = 128, a 2-layer GCN, from P = 16 to 1,024 with 4 and 32 ranks per
   node: epoch time flat vs node-aware, and what ``exchange="auto"`` picks.

    python -m bench.node_aware --only volumes             # byte counts: no lock needed
    flock /tmp/spmmgnn-bench.lock python -m bench.node_aware --only checked model --keep

Writes ``bench/results/node-aware.{json,md}`` (the JSON beside the Markdown, not committed).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from bench import RESULTS, real_graphs
from spmmgnn.benchmark.harness import machine, now, run_mpi, spmmgnn_command
from spmmgnn.benchmark.tables import md_table, publish, where

ALGOS = [("sparse1d", 1), ("sparse15d", 2), ("sparse2d", 1)]
PARTS = ("metis-vol", "twolevel:metis-vol")
CHECKED = [(8, 2), (8, 4), (16, 4)]


def graphs(quick: bool) -> dict[str, sp.csr_array]:
    """WordNet and R-MAT, symmetric, unit weights."""
    from spmmgnn.data.generators import rmat

    scale = 12 if quick else 16
    out = {f"rmat-{scale}": sp.csr_array(rmat(scale, 16, seed=1))}
    try:
        out["wordnet"] = sp.csr_array(real_graphs.load("wordnet"))
    except Exception as exc:  # no apt here: the R-MAT graph alone
        print(f"wordnet unavailable ({exc}); R-MAT only", flush=True)
    return out


def volumes(quick: bool, As: dict) -> dict:
    """Inter-node MB per SpMM, flat vs node-aware, both partitions."""
    from spmmgnn.benchmark.costs import cached_layout
    from spmmgnn.benchmark.volumes import predict

    Ps, Ks = ([8, 16], [2, 4]) if quick else ([8, 16, 32], [2, 4, 8])
    rows = []
    for name, A in As.items():
        layouts: dict = {}
        for P in Ps:
            for K in Ks:
                for algo, c in ALGOS:
                    for part in PARTS:
                        t0 = time.perf_counter()
                        layout = cached_layout(layouts, A, P // c, part, 0,
                                               parts_per_node=max(1, K // c))
                        got = {}
                        for exchange in ("flat", "node"):
                            v = predict(algo, layout, P, c, 64, 4, ranks_per_node=K,
                                        exchange=exchange)
                            node = np.arange(P) // K
                            per_node = np.bincount(node, v.sent_inter)
                            got[exchange] = dict(inter_mb=float(v.sent_inter.sum() / 1e6),
                                                 max_node_mb=float(per_node.max() / 1e6),
                                                 total_mb=float(v.sent.sum() / 1e6))
                        rows.append(dict(graph=name, n=int(A.shape[0]), nnz=int(A.nnz), P=P,
                                         K=K, algorithm=algo, c=c, partitioner=part, **got,
                                         seconds=time.perf_counter() - t0))
            print(f"{name} P={P}: {sum(r['seconds'] for r in rows if r['P'] == P):.0f} s",
                  flush=True)
    return dict(rows=rows, Ps=Ps, Ks=Ks)


def checked(quick: bool, As: dict) -> dict:
    """Real runs: bytes by tier against the model, ms per SpMM flat vs node."""
    from spmmgnn.benchmark.costs import cached_layout
    from spmmgnn.benchmark.records import latest, read_records
    from spmmgnn.benchmark.volumes import predict
    from spmmgnn.data.loaders import load_graph
    from spmmgnn.grid import parse_grid

    points = CHECKED[:2] if quick else CHECKED
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        files = {}
        for name, A in As.items():
            files[name] = tmp / f"{name}.npz"
            sp.save_npz(files[name], sp.csr_matrix(A))
        names = {str(p): n for n, p in files.items()}
        results = tmp / "node.jsonl"
        for P, K in points:
            t0 = time.perf_counter()
            run_mpi(P, [*spmmgnn_command(), "bench", "--quiet", "--threads", "1", "-o",
                        str(results), "--mode", "spmm", "-f", "64", "--repeat",
                        "3" if quick else "5", "--partitioner", "metis-vol", "--graph",
                        *map(str, files.values()), "--algorithm", "sparse1d", "sparse2d",
                        "--exchange", "flat", "node", "--ranks-per-node", str(K)])
            print(f"checked P={P} K={K}: {time.perf_counter() - t0:.0f} s", flush=True)
        layouts: dict = {}
        for r in latest(read_records(str(results))):
            if r.get("mode") != "spmm":
                continue
            if "error" in r:
                raise SystemExit(f"{r['algorithm']} P={r['P']}: {r['error']}")
            A = load_graph(r["graph"]).adj   # as the bench read it
            layout = cached_layout(layouts.setdefault(r["graph"], {}), A, r["P"],
                                   "metis-vol", 0)
            shape = parse_grid(r["grid"]) if r.get("grid") else None
            exchange = r.get("exchange", "flat")
            v = predict(r["algorithm"], layout, r["P"], 1, 64, 4, shape=shape,
                        ranks_per_node=r["ranks_per_node"], exchange=exchange)
            per = r["per_rank"]
            assert per["bytes_sent"] == v.sent.tolist(), (r["algorithm"], r["P"], exchange)
            assert per["bytes_sent_inter"] == v.sent_inter.tolist(), (r["algorithm"], r["P"])
            rows.append(dict(graph=names[r["graph"]], P=r["P"], K=r["ranks_per_node"],
                             algorithm=r["algorithm"], grid=r.get("grid"), exchange=exchange,
                             ms=r["seconds"] * 1e3, exchange_ms=r["breakdown"]["exchange"] * 1e3,
                             inter_mb=sum(per["bytes_sent_inter"]) / 1e6,
                             total_mb=sum(per["bytes_sent"]) / 1e6))
    return dict(rows=rows)


def model(quick: bool) -> dict:
    """The two-tier model to P = 1,024 with 4 and 32 ranks per node."""
    from spmmgnn.benchmark import costs
    from spmmgnn.benchmark.volumes import Layout
    from spmmgnn.data.generators import rmat
    from spmmgnn.data.normalize import normalize
    from spmmgnn.layout import Partition

    scale = 14 if quick else 20
    Ps = [16, 64, 256] if quick else [16, 64, 256, 1024]
    t0 = time.perf_counter()
    A = normalize(rmat(scale, 8, seed=1), "gcn")
    print(f"R-MAT 2^{scale}: n={A.shape[0]} nnz={A.nnz} in {time.perf_counter() - t0:.0f} s",
          flush=True)
    layouts = {k: Layout(A, Partition.contiguous(A.shape[0], k).offsets)
               for k in sorted({P // c for P in Ps for c in (1, 2, 4)})}
    net = costs.NETWORKS["ib-hdr"]
    rate = costs.measure_rate(A, 128)
    f, layers, out = 128, 2, []
    algorithms = ["oblivious1d", "sparse1d", "sparse15d", "sparse2d"]
    for K in (4, 32):
        t0 = time.perf_counter()
        m = costs.Machine(alpha=net.alpha, beta=net.beta, rate=rate, ranks_per_node=K,
                          alpha_intra=net.alpha_intra, beta_intra=net.beta_intra,
                          nics=net.nics)
        rows = costs.predict_all(A, Ps, [1, 2, 4], algorithms, f, 4, m, 2 * layers,
                                 layouts=layouts)
        for r in rows:
            r["ranks_per_node"] = K
        out += rows
        print(f"model K={K}: {time.perf_counter() - t0:.0f} s", flush=True)
    return dict(n=int(A.shape[0]), nnz=int(A.nnz), preset="ib-hdr", network=net.source,
                intra=net.intra_source, rate=rate, f=f, layers=layers, Ps=Ps, times=out)


def render(data: dict) -> str:
    runs = "; ".join(f"`--only {k}` {v['when']}, load before {v['load']}"
                     for k, v in data.get("runs", {}).items())
    lines = ["# Node-aware exchanges (issue 37)", "",
             f"`python -m bench.node_aware` on {where(data['machine'])} "
             f"({data['machine']['cores']} cores): {runs}. The byte counts (`volumes`) need no "
             "quiet machine; `checked` and `model` (which times the local kernel) ran under "
             "`flock /tmp/spmmgnn-bench.lock`.", ""]
    if "volumes" in data:
        vol = data["volumes"]
        lines += ["## Bytes between nodes, flat vs node-aware", "",
                  "The volume model (`spmmgnn.benchmark.node_volumes`, equal to the counters "
                  "rank by rank in `tests/exchange/test_node_exchange.py` and in the runs "
                  "below): MB "
                  "per SpMM that leave a node (f = 64, float32), summed over all nodes, and "
                  "the busiest node's; K consecutive ranks per node. *flat*: every rank sends "
                  "each peer its rows; *node*: a row crosses from node A to node B once. "
                  "`metis-vol`: METIS's volume objective into P parts; `twolevel`: into P/K "
                  "nodes first, then each node into its K ranks (`twolevel:metis-vol`). "
                  "P = K (one node, nothing crosses) is left out. Where node = flat, the "
                  "exchange's communicator has one rank per node: `sparse15d` with c = K "
                  "(a block row's replicas fill a node) and `sparse2d`'s expand along a "
                  "process column when pc >= K (its fold stays inside the node).", ""]
        for graph in sorted({r["graph"] for r in vol["rows"]}):
            rs = [r for r in vol["rows"] if r["graph"] == graph]
            lines += [f"### {graph} (n = {rs[0]['n']:,}, nnz = {rs[0]['nnz']:,})", ""]
            table = []
            for r in sorted(rs, key=lambda r: (r["P"], r["K"], r["algorithm"],
                                               r["partitioner"])):
                f, n = r["flat"], r["node"]
                if r["K"] >= r["P"]:
                    continue   # one node: nothing crosses
                ratio = n["inter_mb"] / f["inter_mb"] if f["inter_mb"] else float("nan")
                g = f"{r['algorithm']}" + (f" c={r['c']}" if r["c"] > 1 else "")
                table.append([r["P"], r["K"], g, r["partitioner"], f"{f['inter_mb']:.2f}",
                              f"{n['inter_mb']:.2f}", f"{ratio:.2f}", f"{f['max_node_mb']:.2f}",
                              f"{n['max_node_mb']:.2f}"])
            lines += md_table(["P", "K", "algorithm", "partition", "flat MB", "node MB",
                               "node / flat", "busiest node flat", "busiest node node"],
                              table, spaced=True)
            lines.append("")
        lines += _partition_summary(vol["rows"])
    if "checked" in data:
        lines += ["## Checked against real runs", "",
                  "`mpiexec -n P spmmgnn bench --mode spmm -f 64 --partitioner metis-vol "
                  "--exchange flat node --ranks-per-node K` (float32, 1 thread per rank, "
                  "oversubscribed: P ranks on this machine's cores). The bytes per rank and "
                  "tier equal the model's (asserted by the script). All ranks share one "
                  "machine's memory, so the times show what the two extra intra-node legs "
                  "cost here, not what a network saves.", ""]
        lines += md_table(
            ["graph", "P", "K", "algorithm", "exchange", "ms / SpMM", "exchange ms",
             "inter-node MB", "total MB"],
            [[r["graph"], r["P"], r["K"], r["algorithm"] + (f" {r['grid']}" if r["grid"] else ""),
              r["exchange"], f"{r['ms']:.2f}", f"{r['exchange_ms']:.2f}", f"{r['inter_mb']:.3f}",
              f"{r['total_mb']:.3f}"]
             for r in sorted(data["checked"]["rows"], key=lambda r: (
                 r["graph"], r["P"], r["K"], r["algorithm"], r["exchange"]))], spaced=True)
        lines.append("")
    if "model" in data:
        md = data["model"]
        lines += ["## Projected to P = 1,024", "",
                  f"`spmmgnn model --ranks-per-node K`'s two-tier model on R-MAT with n = "
                  f"{md['n']:,}, nnz = {md['nnz']:,} (GCN-normalized, contiguous blocks), "
                  f"between nodes preset `{md['preset']}` ({md['network']}; one link per "
                  f"node shared by its ranks), inside a node {md['intra']}; local rate "
                  f"{md['rate'] / 1e9:.2f} G non-zeros x columns / s measured here; f = "
                  f"{md['f']}, a {md['layers']}-layer GCN (epoch = {2 * md['layers']} SpMMs). "
                  "ms per epoch, the best c or grid of each; *auto*: the exchange "
                  "`exchange=\"auto\"` picks (the faster).", ""]
        for K in (4, 32):
            rs = [r for r in md["times"] if r["ranks_per_node"] == K]
            lines += [f"### {K} ranks per node", ""]
            table = []
            for P in md["Ps"]:
                def best(algo, exchange=None, P=P, rs=rs):
                    mine = [r for r in rs if r["P"] == P and r["algorithm"] == algo
                            and r.get("exchange_kind") == exchange]
                    return min(mine, key=lambda r: r["epoch_seconds"]) if mine else None

                cells = []
                for algo, ex in (("oblivious1d", None), ("sparse1d", "flat"),
                                 ("sparse1d", "node"), ("sparse15d", "flat"),
                                 ("sparse15d", "node"), ("sparse2d", "flat"),
                                 ("sparse2d", "node")):
                    b = best(algo, ex)
                    cells.append("-" if b is None else f"{b['epoch_seconds'] * 1e3:.2f}" + (
                        f" ({b['grid'] or 'c=' + str(b['c'])})" if algo != "sparse1d" else ""))
                fl, nd = best("sparse1d", "flat"), best("sparse1d", "node")
                pick = "node" if nd["seconds"] < fl["seconds"] else "flat"
                table.append([P, *cells, pick, f"{fl['inter_bytes_sent'] / 1e6:.1f} / "
                              f"{nd['inter_bytes_sent'] / 1e6:.1f}"])
            lines += md_table(["P", "oblivious1d", "sparse1d flat", "sparse1d node",
                               "sparse15d flat", "sparse15d node", "sparse2d flat",
                               "sparse2d node", "auto (sparse1d)",
                               "inter-node MB sparse1d flat / node"], table, spaced=True)
            lines.append("")
    return "\n".join(lines) + "\n"


def _partition_summary(rows: list[dict]) -> list[str]:
    """Two-level against flat METIS on the node-aware inter-node bytes, per graph and K."""
    out = ["Two-level against flat METIS-vol, node-aware exchange, sparse1d (node MB "
           "twolevel / metis-vol; below 1: the two-level layout sends less between nodes):",
           ""]
    for graph in sorted({r["graph"] for r in rows}):
        cells = []
        for r in rows:
            if (r["graph"], r["algorithm"], r["partitioner"]) != (graph, "sparse1d",
                                                                  "twolevel:metis-vol") \
                    or r["K"] >= r["P"]:
                continue
            flat = next(x for x in rows if (x["graph"], x["P"], x["K"], x["algorithm"],
                                            x["partitioner"]) == (graph, r["P"], r["K"],
                                                                  "sparse1d", "metis-vol"))
            cells.append(f"P={r['P']} K={r['K']}: "
                         f"{r['node']['inter_mb'] / max(flat['node']['inter_mb'], 1e-12):.2f}")
        out.append(f"- {graph}: " + ", ".join(cells))
    return out + [""]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", choices=["volumes", "checked", "model"],
                    default=["volumes", "checked", "model"])
    ap.add_argument("--quick", action="store_true", help="small graphs, fewer P")
    ap.add_argument("--keep", action="store_true",
                    help="keep the other sections of an earlier run's JSON")
    args = ap.parse_args()
    load = Path("/proc/loadavg").read_text().split()[:3]
    name = "node-aware-quick" if args.quick else "node-aware"
    data = {}
    if args.keep and (RESULTS / f"{name}.json").exists():   # the sections not run again
        data = json.loads((RESULTS / f"{name}.json").read_text())
    runs = data.setdefault("runs", {})
    when = now()
    for section in args.only:
        runs[section] = dict(when=when, load=" ".join(load))
    data.update(machine=machine(), when=when, load=" ".join(load))
    As = graphs(args.quick) if {"volumes", "checked"} & set(args.only) else {}
    if "volumes" in args.only:
        data["volumes"] = volumes(args.quick, As)
    if "checked" in args.only:
        data["checked"] = checked(args.quick, As)
    if "model" in args.only:
        data["model"] = model(args.quick)
    publish(RESULTS / name, data, render)
    print(render(data))


if __name__ == "__main__":
    main()
