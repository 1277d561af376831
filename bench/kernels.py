"""Local kernels, each against the previous kernel, torch.sparse.mm (CSR) and scipy.

Same matrix, same float32 dense operand, f in {1, 4, 16, 32, 64, 128, 256}, 1 and 2 threads,
on a random graph (100k vertices, ~2M non-zeros) and an R-MAT power-law graph of similar size:

- ``A @ X``: today's choice (column blocks sized from the last-level cache where they win),
  the previous kernel, today's kernel unblocked, the blocked kernel forced, torch and scipy;
- ``A.T @ Y``: the transposed CSR (today), the previous scan split over feature columns only,
  the scan split over feature columns x output rows (no copy), torch with a CSR of A.T (what a
  tuned torch GCN keeps) and scipy;
- scatter-add of a halo's worth of rows: feature x destination-row split (today) vs the
  previous feature-only split.

Variants of one case run interleaved (round robin, best of ``--repeat``) so load from other
processes hits them alike. scipy is single-threaded: its 1-thread time is the reference at
every thread count. Writes JSON, a Markdown table and (with matplotlib) a PNG, all three
from the JSON (``python -m bench.tables`` draws them again).

    python -m bench.kernels [--graphs random rmat] [--out bench/results/kernels.json] [--quick]
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch

from bench import RESULTS
from spmmgnn import set_threads
from spmmgnn.benchmark.harness import interleaved, machine
from spmmgnn.benchmark.plots import plot_file
from spmmgnn.benchmark.rates import copy_bandwidth
from spmmgnn.benchmark.tables import md_table, publish
from spmmgnn.data.generators import random_graph, rmat
from spmmgnn.local import kernels
from spmmgnn.local.local_matrix import LocalCSR

warnings.filterwarnings("ignore", message=".*[Ss]parse.*")


def graphs(quick: bool, names: list[str]) -> dict[str, sp.csr_array]:
    if quick:
        made = {"random": lambda: random_graph(20_000, 20, seed=1),
                "rmat": lambda: rmat(14, 10, seed=1)}
    else:
        made = {"random": lambda: random_graph(100_000, 20, seed=1),  # ~2M non-zeros
                "rmat": lambda: rmat(17, 8, seed=1)}                   # 131k vertices, ~1.9M
    return {n: sp.csr_array(made[n]()) for n in names}


def torch_csr(A: sp.csr_array) -> torch.Tensor:
    return torch.sparse_csr_tensor(torch.from_numpy(A.indptr.astype(np.int64)),
                                   torch.from_numpy(A.indices.astype(np.int64)),
                                   torch.from_numpy(A.data.astype(np.float32)), size=A.shape)


def spmm_bytes(n_out: int, n_in: int, nnz: int, f: int, s: int = 4) -> int:
    """Compulsory bytes of one CSR SpMM: indices + values, each input row once, the output
    written once (row pointers are negligible). A kernel reading x once per non-zero moves
    nnz * f * s instead of n_in * f * s for the input."""
    return nnz * 8 + (n_in + n_out) * f * s


def bench_case(name: str, A: sp.csr_array, f: int, threads: list[int], repeat: int,
               scat_idx: np.ndarray) -> list[dict]:
    rng = np.random.default_rng(f)
    M, MT = LocalCSR(A), LocalCSR(A)
    A32, AT32 = A.astype(np.float32), A.T.tocsr().astype(np.float32)
    At, AtT = torch_csr(A), torch_csr(sp.csr_array(A.T.tocsr()))
    X = rng.standard_normal((A.shape[1], f)).astype(np.float32)
    Y = rng.standard_normal((A.shape[0], f)).astype(np.float32)
    Xt, Yt = torch.from_numpy(X), torch.from_numpy(Y)
    out = np.empty((A.shape[0], f), dtype=np.float32)
    outt = np.empty((A.shape[1], f), dtype=np.float32)
    src = rng.standard_normal((scat_idx.size, f)).astype(np.float32)
    acc = np.zeros((A.shape[1], f), dtype=np.float32)
    n_blocks = M.col_blocks(f, 4)
    forced, unblocked = LocalCSR(A), LocalCSR(A)
    forced.kernel, unblocked.kernel = "blocked", "unrolled"
    set_threads(1)
    ref = interleaved({"scipy": lambda: A32 @ X, "t_scipy": lambda: AT32 @ Y}, repeat)
    data = M.data(np.float32)
    rows = []
    for t in threads:
        set_threads(t)
        torch.set_num_threads(t)
        n_par = kernels.column_split(f)
        # prev: the previous kernel, one non-zero per pass and no column blocks, which is
        # still kernels.csr_matmul (used below UNROLL_MIN_F columns)
        fwd = dict(numba=lambda: M.matmul(X, out, False),
                   prev=lambda: kernels.csr_matmul(M.indptr, M.indices, data, X, out, M.chunks(),
                                                False),
                   unblocked=lambda: unblocked.matmul(X, out, False),
                   torch=lambda: torch.sparse.mm(At, Xt))
        if forced.llc_blocks(f, 4) > 1:  # measured even where the policy leaves it off
            fwd["blocked"] = lambda: forced.matmul(X, out, False)
        r = interleaved(fwd, repeat)
        M.matmul(X, out, False)
        np.testing.assert_allclose(out, A32 @ X, rtol=1e-4, atol=1e-3)
        r |= {"t_" + k: v for k, v in interleaved(dict(
            numba=lambda: MT.t_matmul(Y, outt, False),
            prev=lambda p=n_par: kernels.csr_t_matmul(M.indptr, M.indices, data, Y, outt,
                                                      False, p, 1),
            scan=lambda p=n_par: kernels.csr_t_matmul(M.indptr, M.indices, data, Y, outt,
                                                      False, p, kernels.row_split(p)),
            torch=lambda: torch.sparse.mm(AtT, Yt)), repeat).items()}
        MT.t_matmul(Y, outt, False)
        np.testing.assert_allclose(outt, AT32 @ Y, rtol=1e-4, atol=1e-3)
        r |= {"sa_" + k: v for k, v in interleaved(dict(
            numba=lambda p=n_par: kernels.scatter_add(src, scat_idx, acc, p),
            prev=lambda p=n_par: kernels.scatter_add(src, scat_idx, acc, p, 1)),
            repeat).items()}
        r |= ref
        moved = spmm_bytes(A.shape[0], A.shape[1], A.nnz, f)
        rows.append(dict(
            graph=name, n=A.shape[0], nnz=int(A.nnz), f=f, threads=t, col_blocks=n_blocks,
            forced_col_blocks=forced.llc_blocks(f, 4),
            seconds=r, bytes_compulsory=moved, bytes_gather=A.nnz * (8 + 4 * f) + out.nbytes,
            scatter_rows=int(scat_idx.size),
            numba_vs_torch=r["numba"] / r["torch"], numba_vs_scipy=r["numba"] / r["scipy"],
            numba_vs_prev=r["numba"] / r["prev"],
            t_numba_vs_torch=r["t_numba"] / r["t_torch"],
            t_numba_vs_scipy=r["t_numba"] / r["t_scipy"],
            t_numba_vs_prev=r["t_numba"] / r["t_prev"],
            sa_numba_vs_prev=r["sa_numba"] / r["sa_prev"],
            numba_gbs=moved / r["numba"] / 1e9, t_numba_gbs=moved / r["t_numba"] / 1e9))
        print(f"{name:>6} f={f:<3} t={t} blocks={n_blocks}: A@X {r['numba'] * 1e3:7.2f} ms "
              f"(prev {r['prev'] * 1e3:7.2f}, torch {r['torch'] * 1e3:7.2f}, scipy "
              f"{r['scipy'] * 1e3:7.2f})  A.T@Y {r['t_numba'] * 1e3:7.2f} (prev "
              f"{r['t_prev'] * 1e3:7.2f}, scan {r['t_scan'] * 1e3:7.2f}, torch "
              f"{r['t_torch'] * 1e3:7.2f})  scatter {r['sa_numba'] * 1e3:6.2f} (prev "
              f"{r['sa_prev'] * 1e3:6.2f})", flush=True)
    return rows


def render(data: dict) -> str:
    """The table of a run (its JSON: the copy bandwidth and one row per graph, f and T)."""
    bw = data["copy_bandwidth_gbs"]
    head = ["graph", "f", "T", "blk", "A@X ms", "/prev", "/torch", "/scipy", "GB/s", "Aᵀ@Y ms",
            "/prev", "/torch", "/scipy", "scatter /prev"]
    rows = []
    for r in data["results"]:
        s = r["seconds"]
        rows.append([r["graph"], r["f"], r["threads"], r["col_blocks"], f"{s['numba'] * 1e3:.2f}",
                     f"{r['numba_vs_prev']:.2f}", f"{r['numba_vs_torch']:.2f}",
                     f"{r['numba_vs_scipy']:.2f}", f"{r['numba_gbs']:.1f}",
                     f"{s['t_numba'] * 1e3:.2f}", f"{r['t_numba_vs_prev']:.2f}",
                     f"{r['t_numba_vs_torch']:.2f}", f"{r['t_numba_vs_scipy']:.2f}",
                     f"{r['sa_numba_vs_prev']:.2f}"])
    lines = [f"copy bandwidth (read + write): {bw['1']:.1f} GB/s with 1 thread, "
             f"{bw['2']:.1f} GB/s with 2. Ratios are time / other time (< 1: numba faster); "
             "GB/s counts the compulsory bytes (A once, x once, out once).", "",
             *md_table(head, rows)]
    return "\n".join(lines) + "\n"


KERNEL_LOOKS = {"numba": "-", "prev": ":", "torch": "--"}   # line style per kernel


def figure(plt, data: dict):
    """Milliseconds against f, log-log: a panel per graph and product (A @ X, A.T @ Y), a
    line per kernel and thread count (colour: the kernel; marker: the threads) and scipy."""
    from spmmgnn.benchmark.plots import MARKERS, PALETTE, draw_lines, legend_outside

    rows = data["results"]
    names = sorted({r["graph"] for r in rows})
    threads = sorted({r["threads"] for r in rows})
    fig, axes = plt.subplots(2, len(names), figsize=(7.6 * len(names), 8.0), squeeze=False)
    colour = dict(zip([*KERNEL_LOOKS, "scipy"], PALETTE, strict=False))
    for col, g in enumerate(names):
        for row, (pre, title) in enumerate([("", "A @ X"), ("t_", "A.T @ Y")]):
            ax = axes[row][col]
            series, styles = {}, {}
            for i, t in enumerate(threads):
                sel = [r for r in rows if r["graph"] == g and r["threads"] == t]
                for key, dash in KERNEL_LOOKS.items():
                    series[(key, f"{t}T")] = ([r["f"] for r in sel],
                                              [r["seconds"][pre + key] * 1e3 for r in sel])
                    styles[(key, f"{t}T")] = dict(color=colour[key], linestyle=dash,
                                                  marker=MARKERS[i % len(MARKERS)])
            sel = [r for r in rows if r["graph"] == g and r["threads"] == threads[0]]
            series[("scipy", "1T")] = ([r["f"] for r in sel],
                                       [r["seconds"][pre + "scipy"] * 1e3 for r in sel])
            styles[("scipy", "1T")] = dict(color=colour["scipy"], linestyle=":",
                                           marker=MARKERS[len(threads) % len(MARKERS)])
            draw_lines(ax, series, styles, log=True)
            ax.set(xscale="log", yscale="log", xlabel="f (dense columns)", ylabel="ms",
                   title=f"{g} {title}: n={sel[0]['n']}, nnz={sel[0]['nnz']}")
            legend_outside(ax)
    return fig


def plot(data: dict, path) -> None:
    """``figure`` written to ``path`` (nothing without matplotlib)."""
    plot_file(path, figure, data)


def write(stem, data: dict) -> None:
    """The run's JSON, its table and its plot."""
    publish(stem, data, render)
    plot(data, Path(stem).with_suffix(".png"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(RESULTS / "kernels.json"))
    ap.add_argument("--quick", action="store_true", help="small graphs, for a smoke run")
    ap.add_argument("--graphs", nargs="+", default=["random", "rmat"],
                    choices=["random", "rmat"])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--widths", type=int, nargs="+", default=[1, 4, 16, 32, 64, 128, 256])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    bw = {"1": copy_bandwidth(), "2": copy_bandwidth(threads=2)}
    print(f"streaming copy bandwidth (read + write): {bw['1']:.1f} GB/s numpy 1 thread, "
          f"{bw['2']:.1f} GB/s numba 2 threads; last-level cache {kernels.LLC_BYTES >> 20} MiB")
    rows = []
    for name, A in graphs(args.quick, args.graphs).items():
        # a halo's worth of received rows: a third of the vertices, repeats allowed
        idx = np.random.default_rng(7).integers(0, A.shape[1], A.shape[1] // 3)
        for f in args.widths:
            rows += bench_case(name, A, f, args.threads, args.repeat, idx)
    stem = Path(args.out).with_suffix("")
    write(stem, dict(machine=machine(), copy_bandwidth_gbs=bw, llc_bytes=kernels.LLC_BYTES,
                     results=rows))
    print(f"wrote {stem}.json, .md and .png")


if __name__ == "__main__":
    main()
