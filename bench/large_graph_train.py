"""Write a large partitioned graph and train on it (issue 47): the last two steps of
"partition, write and train a 10^7-vertex graph on this machine".

    python bench/large_graph_train.py --stem /tmp/spmmgnn-large/rmat-s24-e7 \\
        --parts /tmp/spmmgnn-large/rmat-s24-e7-k16-kaminpar.npy --P 16 --features 8 \\
        --epochs 3 --out bench/results/large_graph_train.json

The graph is ``bench/large_graph.py``'s lean R-MAT (``<stem>.indptr.npy``,
``<stem>.indices.npy``, memory-mapped); ``--parts`` a part vector that
``bench/large_graph.py --save-parts`` kept from its partitioning run (k = P). R-MAT has no
features: each vertex gets a class uniformly at random and ``signal * mu_class + N(0, I)``
features of ``--features`` columns (the CSBM recipe of ``spmmgnn.data.csbm``, without its
edges), so the training run has something to learn from the features alone. The write is
``data.partitioned.write_partitioned`` with the given part vector (its metrics, one relabelled
copy, the atomic HDF5 writer) in this process: its seconds and peak resident memory. Then
``mpiexec -n P spmmgnn train --dataset FILE --algorithm sparse1d`` reads one block row per
rank; its seconds, its per-epoch breakdown (``--json``) and the resident memory of all its
ranks together, sampled every 0.5 s from ``/proc`` (VmRSS, which counts the shared library
pages once per rank, and PSS, which divides them), and each rank's own peak.
``--train-only`` trains on the file an earlier run wrote; ``--kill-at-gib`` stops a run
whose summed RSS passes that many GiB.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _graph(stem: str, features: int, classes: int, seed: int):
    """The lean R-MAT with CSBM-style features, labels and a 60/20/20 random split."""
    from bench.large_graph import lean_matrix
    from spmmgnn.data.graph import Graph
    from spmmgnn.data.splits import random_split

    adj = lean_matrix(stem, np.float32)
    n = adj.shape[0]
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, n).astype(np.int64)
    means = rng.standard_normal((classes, features)).astype(np.float32)
    means /= np.linalg.norm(means, axis=1, keepdims=True)
    x = np.empty((n, features), dtype=np.float32)
    for lo in range(0, n, 1 << 22):  # bounded float64 temporaries
        hi = min(n, lo + (1 << 22))
        x[lo:hi] = rng.standard_normal((hi - lo, features)) + 0.85 * means[labels[lo:hi]]
    return Graph(adj=adj, features=x, labels=labels, masks=random_split(n, seed + 1,
                                                                         (0.6, 0.2, 0.2)),
                 num_classes=classes, directed=False, name=Path(stem).name)


def _rss_of(pids: list[int]) -> int:
    return sum(_status_of(pid).get("VmRSS", 0) for pid in pids)


def _status_of(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of a process in bytes, and Pss (its resident pages, each shared page
    divided among the processes mapping it: the ranks share the libraries' pages, which
    VmRSS counts once per rank); {} once it has gone."""
    out = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line[:5]] = int(line.split()[1]) * 1024
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                out["Pss"] = int(line.split()[1]) * 1024
    except OSError:
        return {}
    return out


def _descendants(root: int) -> list[int]:
    kids: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += kids.get(pid, [])
    return out


def train(h5: Path, P: int, epochs: int, hidden: int, json_out: Path,
          kill_at: float | None = None) -> dict:
    """``mpiexec -n P spmmgnn train`` on the file (this checkout's spmmgnn): seconds, the
    peaks of the summed RSS and PSS of all its processes (sampled every 0.5 s), each
    rank's own peak (VmHWM), exit status. ``kill_at``: GiB of summed RSS at which the run
    is stopped (None: never)."""
    cmd = ["mpiexec", "-n", str(P), sys.executable, "-m", "spmmgnn.cli", "train",
           "--dataset", str(h5), "--algorithm", "sparse1d", "--epochs", str(epochs),
           "--hidden", str(hidden), "--threads", "1", "--eval-every", "0",
           "--json", str(json_out)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env)
    peak, pss, hwm, killed, done = [0], [0], {}, [False], threading.Event()

    def sample() -> None:
        while not done.is_set():
            rows = {pid: _status_of(pid) for pid in _descendants(proc.pid)}
            peak[0] = max(peak[0], sum(r.get("VmRSS", 0) for r in rows.values()))
            pss[0] = max(pss[0], sum(r.get("Pss", 0) for r in rows.values()))
            for pid, r in rows.items():
                if r.get("VmHWM", 0) > 2**28:  # the ranks (not mpiexec and its proxy)
                    hwm[pid] = max(hwm.get(pid, 0), r["VmHWM"])
            if kill_at is not None and peak[0] > kill_at * 2**30 and not killed[0]:
                killed[0] = True
                proc.kill()
                for pid in rows:
                    try:
                        os.kill(pid, 9)
                    except OSError:
                        pass
            time.sleep(0.5)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, _ = proc.communicate()
    done.set()
    sampler.join()
    return dict(command=" ".join(cmd[:3] + ["spmmgnn"] + cmd[6:]), status=proc.returncode,
                seconds=time.perf_counter() - t, peak_rss_all_ranks_gib=peak[0] / 2**30,
                peak_pss_all_ranks_gib=pss[0] / 2**30,
                peak_rss_per_rank_gib=sorted((v / 2**30 for v in hwm.values()), reverse=True),
                killed_at_gib=kill_at if killed[0] else None,
                output_tail=out.strip().splitlines()[-12:])


def write(args, h5: Path) -> dict:
    """Build the graph and write it partitioned by ``--parts``: sizes, seconds, peak RSS and
    the partition's metrics."""
    from spmmgnn.data.partitioned import write_partitioned

    parts = np.load(args.parts, allow_pickle=False)
    t = time.perf_counter()
    g = _graph(args.stem, args.features, args.classes, args.seed)
    row = dict(n=g.n, nnz=int(g.adj.nnz), build_seconds=time.perf_counter() - t)
    t = time.perf_counter()
    part = write_partitioned(g, h5, args.P, method=Path(args.parts).stem,
                             part_vector=parts, progress=lambda s: print(s, flush=True))
    del g
    m = part.metrics
    row.update(write_seconds=time.perf_counter() - t,
               write_peak_rss_gib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
               h5_gib=h5.stat().st_size / 2**30, total_volume=m.total_volume,
               max_send=m.max_send, load_imbalance=m.load_imbalance)
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stem", required=True, help="<stem>.indptr.npy / .indices.npy")
    ap.add_argument("--parts", help="part vector (.npy) with k = --P (not with --train-only)")
    ap.add_argument("--P", type=int, default=16)
    ap.add_argument("--features", type=int, default=8)
    ap.add_argument("--classes", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=16)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "large_graph_train.json"))
    ap.add_argument("--train-only", action="store_true",
                    help="skip the write: train on the <stem>-P<P>.h5 an earlier run wrote")
    ap.add_argument("--kill-at-gib", type=float, default=None,
                    help="stop the training when the summed RSS of its ranks passes this")
    args = ap.parse_args(argv)
    if not args.train_only and not args.parts:
        ap.error("--parts is needed to write the file (or give --train-only)")
    h5 = Path(f"{args.stem}-P{args.P}.h5")
    row: dict = dict(graph=Path(args.stem).name, P=args.P, features=args.features,
                     classes=args.classes, hidden=args.hidden, epochs=args.epochs,
                     load_before=os.getloadavg()[0])
    if args.train_only:
        row.update(h5_gib=h5.stat().st_size / 2**30)
    else:
        row.update(write(args, h5))
    print(json.dumps(row), flush=True)
    json_out = Path(f"{args.stem}-P{args.P}-train.json")
    row.update(train=train(h5, args.P, args.epochs, args.hidden, json_out, args.kill_at_gib),
               load_after=os.getloadavg()[0])
    if json_out.exists():
        rec = json.loads(json_out.read_text())
        row["train"]["record"] = {key: rec[key] for key in rec if key != "epochs"}
        row["train"]["epochs"] = rec.get("epochs")
    from spmmgnn.runtime.atomic import write_text_atomic

    write_text_atomic(Path(args.out), json.dumps(row, indent=1))
    print(json.dumps({x: row[x] for x in row if x != "train"}), flush=True)
    print(json.dumps(row["train"], indent=1)[:4000], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
