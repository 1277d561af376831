"""A large R-MAT graph built in O(nnz) memory, and the large-graph partitioning benchmark.

``rmat_lean(scale, edge_factor, seed)`` draws the same kind of graph as
``spmmgnn.data.generators.rmat`` (Graph500 parameters, symmetric, self loops and duplicates
dropped, ids permuted) without its int64 edge lists and sort: each edge's quadrant bits come
from a counter-based hash of (seed, edge), so two passes (degrees, then fill) regenerate the
same edges in parallel, and rows are sorted and deduplicated in place. Peak memory is about
the int32 neighbour array twice (before and after deduplication) plus O(n).

    python -m bench.large_graph --scale 24 --edge-factor 7 --k 64 256 1024 \\
        --methods metis-vol kaminpar default --out bench/results/partition_large

Every (method, k) runs in a fresh process (``bench.partition_child`` reads the graph from
the ``.npy`` files written once, memory-mapped) with its time and peak memory; with
``--write``, ``spmmgnn datasets convert ... --parts k`` writes the HDF5 file (partitioned by
``--write-method``) and every block row is read back on its own and checked.
``bench.partition`` shows the JSON rows in its report (``partition_real.md``'s "Large
graphs"); ``bench/results/large-graph.md`` discusses them with ``partitioners.estimate``'s
estimate next to each. At 2^24 KaMinPar's estimate (about
27 GiB) is above what a 24 GB machine has free, so ``partition`` refuses it there unless
``SPMMGNN_AVAILABLE_MEMORY`` (bytes) says more is available.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from numba import njit, prange

from bench import RESULTS, ROOT
from spmmgnn.benchmark.harness import write_json
from spmmgnn.partitioners.model import _compact_rows, _merge_rows


@njit(cache=True, inline="always")
def _mix(x):
    """splitmix64: a well-mixed 64-bit value from a counter."""
    x = (x + np.uint64(0x9E3779B97F4A7C15))
    z = x
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@njit(cache=True)
def _edge(e, scale, seed, a, ab, abc):
    """The (row, col) of R-MAT edge ``e``: one uniform draw per level."""
    r = 0
    c = 0
    state = _mix(np.uint64(seed) * np.uint64(0x100000001B3) + np.uint64(e))
    for level in range(scale):
        state = _mix(state)
        u = (state >> np.uint64(11)) * (1.0 / 9007199254740992.0)
        if u >= ab:
            r |= 1 << level
        if (u >= a and u < ab) or u >= abc:
            c |= 1 << level
    return r, c


@njit(cache=True, parallel=True)
def _degrees(m, scale, seed, perm, a, ab, abc, threads):
    n = perm.size
    deg = np.zeros((threads, n), dtype=np.int64)
    chunk = (m + threads - 1) // threads
    for t in prange(threads):
        for e in range(t * chunk, min(m, (t + 1) * chunk)):
            r, c = _edge(e, scale, seed, a, ab, abc)
            if r != c:
                deg[t, perm[r]] += 1
                deg[t, perm[c]] += 1
    return deg.sum(axis=0)


@njit(cache=True)
def _fill(m, scale, seed, perm, a, ab, abc, indptr, indices):
    pos = indptr[:-1].copy()
    for e in range(m):
        r, c = _edge(e, scale, seed, a, ab, abc)
        if r != c:
            u, v = perm[r], perm[c]
            indices[pos[u]] = v
            pos[u] += 1
            indices[pos[v]] = u
            pos[v] += 1


def lean_matrix(stem, dtype=np.int8):
    """The graph of ``<stem>.indptr.npy`` / ``<stem>.indices.npy`` (``rmat_lean``'s files,
    memory-mapped) as a CSR array of ``dtype`` ones; int32 pointers where they fit, or scipy
    would widen the int32 indices to an int64 copy."""
    import scipy.sparse as sp

    indptr = np.load(f"{stem}.indptr.npy", mmap_mode="r", allow_pickle=False)
    indices = np.load(f"{stem}.indices.npy", mmap_mode="r", allow_pickle=False)
    if indptr[-1] < 2**31 - 1:
        indptr = indptr.astype(np.int32)
    n = indptr.size - 1
    return sp.csr_array((np.ones(indices.size, dtype=dtype), indices, indptr), shape=(n, n))


def rmat_lean(scale: int, edge_factor: int = 16, seed: int = 0,
              abcd=(0.57, 0.19, 0.19, 0.05)) -> tuple[np.ndarray, np.ndarray]:
    """(indptr int64, indices int32) of a symmetric R-MAT graph on 2^scale vertices."""
    from numba import get_num_threads

    n, m = 1 << scale, edge_factor << scale
    a, b, c, _ = abcd
    perm = np.random.default_rng(seed).permutation(n)
    deg = _degrees(m, scale, seed, perm, a, a + b, a + b + c, get_num_threads())
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(deg, out=indptr[1:])
    del deg
    indices = np.empty(int(indptr[-1]), dtype=np.int32)
    _fill(m, scale, seed, perm, a, a + b, a + b + c, indptr, indices)
    # rows sorted and deduplicated as the partitioners' graph is (no self loops were drawn)
    keep = _merge_rows(indptr, indices, True)
    out_ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(keep, out=out_ptr[1:])
    _compact_rows(indptr, indices, keep, out_ptr)
    return out_ptr, indices[:int(out_ptr[-1])].copy()


def write_and_read(stem: Path, k: int, method: str) -> dict:
    """``spmmgnn datasets convert`` of the graph with ``--parts k --partitioner method`` (its
    seconds and peak memory, from ``wait4``), then every block row read on its own: the rows
    and non-zeros add up to the graph's, and the peak memory of the reading process."""
    import resource

    import scipy.sparse as sp

    from spmmgnn.data.h5graph import read_block_row, read_offsets

    npz = Path(f"{stem}.npz")
    if not npz.exists():
        sp.save_npz(npz, lean_matrix(stem), compressed=False)
    h5 = Path(f"{stem}-k{k}.h5")
    cmd = [sys.executable, "-m", "spmmgnn.cli", "datasets", "convert", str(npz), "--out",
           str(h5), "--parts", str(k), "--partitioner", method]
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    out, err = proc.stdout.read(), proc.stderr.read()
    row = dict(write_method=method, write_seconds=time.perf_counter() - t,
               write_peak_rss_mib=usage.ru_maxrss / 1024.0, write_status=status,
               write_output=(out or err).strip().splitlines()[-1:])
    if status != 0:
        return row
    t = time.perf_counter()
    offsets = read_offsets(h5)
    rows = nnz = 0
    for b in range(offsets.size - 1):
        blk = read_block_row(h5, block=b, whole_perm=False)
        assert blk.adj.shape[0] == offsets[b + 1] - offsets[b]
        rows += blk.adj.shape[0]
        nnz += blk.adj.nnz
    total = int(np.load(f"{stem}.indptr.npy", mmap_mode="r")[-1])
    row.update(read_seconds=time.perf_counter() - t, read_rows=rows, read_nnz=nnz,
               read_ok=bool(rows == offsets[-1] and nnz == total),
               read_peak_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
               h5_mib=h5.stat().st_size / 2**20)
    h5.unlink()
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=int, default=24)
    ap.add_argument("--edge-factor", type=int, default=7)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--k", nargs="+", type=int, default=[64, 256, 1024])
    ap.add_argument("--methods", nargs="+", default=["metis-vol", "kaminpar", "default"])
    ap.add_argument("--dir", default="/tmp/spmmgnn-large", help="where the graph files go")
    ap.add_argument("--time-limit", type=float, default=3600.0)
    ap.add_argument("--write", action="store_true",
                    help="also write the HDF5 file (datasets convert --parts k) and read it "
                         "back per block row")
    ap.add_argument("--write-method", default="kaminpar",
                    help="the partitioner of the written file")
    ap.add_argument("--out", default=str(RESULTS / "partition_large"))
    ap.add_argument("--save-parts", action="store_true",
                    help="keep each run's part vector as <stem>-k<k>-<method>.npy (to train "
                         "on the written file with those parts)")
    args = ap.parse_args(argv)
    d = Path(args.dir)
    d.mkdir(parents=True, exist_ok=True)
    stem = d / f"rmat-s{args.scale}-e{args.edge_factor}"
    if not Path(f"{stem}.indices.npy").exists():
        t = time.perf_counter()
        indptr, indices = rmat_lean(args.scale, args.edge_factor, args.seed)
        np.save(f"{stem}.indptr.npy", indptr)
        np.save(f"{stem}.indices.npy", indices)
        print(f"generated n={indptr.size - 1:,} nnz={indices.size:,} in "
              f"{time.perf_counter() - t:.1f} s", flush=True)
    from bench.partition import child

    out = Path(args.out)
    rows = json.loads(out.with_suffix(".json").read_text())["rows"] if out.with_suffix(
        ".json").exists() else []
    command = ("python -m bench.large_graph " + " ".join(sys.argv[1:] if argv is None
                                                          else argv)).strip()
    for k in args.k:
        for method in args.methods:
            if any(r["k"] == k and r["method"] == method and r.get("graph") == stem.name
                   for r in rows):
                continue
            spec = dict(code=str(ROOT), graph=f"npy:{stem}", k=k, method=method,
                        epsilon=0.03, seed=args.seed, threads=None, deb_root="",
                        save_parts=f"{stem}-k{k}-{method}.npy" if args.save_parts else None)
            t = time.perf_counter()
            try:
                proc = child(spec, args.time_limit, check=False)
                if proc.returncode != 0:
                    row = dict(failed=proc.stderr.strip().splitlines()[-1:],
                               seconds=time.perf_counter() - t)
                else:
                    row = proc.last_json()
            except subprocess.TimeoutExpired:
                row = dict(timed_out=True, seconds=time.perf_counter() - t)
            row.update(graph=stem.name, k=k, method=method, load=os.getloadavg()[0])
            rows.append(row)
            print(json.dumps({x: row.get(x) for x in ("k", "method", "seconds", "total_volume",
                                                      "max_send", "peak_rss_mib", "failed",
                                                      "timed_out")}), flush=True)
            write_json(out.with_suffix(".json"), dict(command=command, rows=rows))
        if args.write and not any(r["k"] == k and r.get("write_method") for r in rows):
            row = dict(graph=stem.name, k=k, method="write",
                       **write_and_read(stem, k, args.write_method))
            rows.append(row)
            print(json.dumps(row), flush=True)
            write_json(out.with_suffix(".json"), dict(command=command, rows=rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
