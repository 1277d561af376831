"""Local SpMM kernel: numba CSR x dense vs scipy.sparse and torch.sparse.mm (CSR).

Same matrix, same float32 dense operand, f in {16, 32, 64, 128, 256}, 1 and 2 threads, on a
random graph (100k vertices, ~2M non-zeros) and an R-MAT power-law graph of similar size.
scipy's SpMM is single-threaded, so its 1-thread time is the reference at every thread count.
Writes JSON (and a PNG if matplotlib is installed).

    python bench/kernels.py [--out bench/results/kernels.json] [--quick]
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np
import torch

from spmmgnn import set_threads
from spmmgnn.data.generators import random_graph, rmat
from spmmgnn.local_matrix import LocalCSR

from common import RESULTS, best_time, copy_bandwidth, machine, pyplot, write_json

warnings.filterwarnings("ignore", message=".*[Ss]parse.*")


def graphs(quick: bool):
    if quick:
        return {"random": random_graph(20_000, 20, seed=1), "rmat": rmat(14, 10, seed=1)}
    return {"random": random_graph(100_000, 20, seed=1),  # ~2M non-zeros
            "rmat": rmat(17, 8, seed=1)}                   # 131k vertices, ~1.9M non-zeros


def bench_graph(name, A, widths, threads, repeat) -> list[dict]:
    M = LocalCSR(A)
    A32 = A.astype(np.float32)
    At = torch.sparse_csr_tensor(torch.from_numpy(A.indptr.astype(np.int64)),
                                 torch.from_numpy(A.indices.astype(np.int64)),
                                 torch.from_numpy(A.data.astype(np.float32)), size=A.shape)
    rows = []
    for f in widths:
        X = np.random.default_rng(f).standard_normal((A.shape[1], f)).astype(np.float32)
        Xt = torch.from_numpy(X)
        out = np.empty((A.shape[0], f), dtype=np.float32)
        set_threads(1)
        scipy_t = best_time(lambda: A32 @ X, repeat)  # noqa: B023
        for t in threads:
            set_threads(t)
            torch.set_num_threads(t)
            numba_t = best_time(lambda: M.matmul(X, out, accumulate=False), repeat)  # noqa: B023
            torch_t = best_time(lambda: torch.sparse.mm(At, Xt), repeat)  # noqa: B023
            np.testing.assert_allclose(out, A32 @ X, rtol=1e-4, atol=1e-4)
            # bytes a CSR SpMM must move at least: values+indices, one X row per non-zero
            # (gathered), one output row per matrix row
            moved = A.nnz * (4 + 4 + 4 * f) + A.shape[0] * 4 * f
            rows.append(dict(
                graph=name, n=A.shape[0], nnz=int(A.nnz), f=f, threads=t,
                numba_s=numba_t["min"], torch_s=torch_t["min"], scipy_s=scipy_t["min"],
                numba_median_s=numba_t["median"], torch_median_s=torch_t["median"],
                speedup_vs_torch=torch_t["min"] / numba_t["min"],
                speedup_vs_scipy=scipy_t["min"] / numba_t["min"],
                numba_gbs=moved / numba_t["min"] / 1e9,
                numba_gflops=2 * A.nnz * f / numba_t["min"] / 1e9))
            r = rows[-1]
            print(f"{name:>6} f={f:<3} t={t}: numba {r['numba_s'] * 1e3:7.1f} ms  torch "
                  f"{r['torch_s'] * 1e3:7.1f} ms  scipy {r['scipy_s'] * 1e3:7.1f} ms  "
                  f"x{r['speedup_vs_torch']:.2f} vs torch  x{r['speedup_vs_scipy']:.2f} vs "
                  f"scipy  {r['numba_gbs']:.1f} GB/s", flush=True)
    return rows


def plot(rows, path) -> None:
    plt = pyplot()
    if plt is None:
        return
    names = sorted({r["graph"] for r in rows})
    fig, axes = plt.subplots(1, len(names), figsize=(6 * len(names), 4), squeeze=False)
    for ax, g in zip(axes[0], names, strict=True):
        for t in sorted({r["threads"] for r in rows}):
            sel = [r for r in rows if r["graph"] == g and r["threads"] == t]
            f = [r["f"] for r in sel]
            ax.plot(f, [r["numba_s"] * 1e3 for r in sel], "o-", label=f"numba {t}T")
            ax.plot(f, [r["torch_s"] * 1e3 for r in sel], "s--", label=f"torch.sparse.mm {t}T")
        sel = [r for r in rows if r["graph"] == g and r["threads"] == 1]
        ax.plot([r["f"] for r in sel], [r["scipy_s"] * 1e3 for r in sel], "k:", label="scipy")
        ax.set(xscale="log", yscale="log", xlabel="f (dense columns)", ylabel="ms per SpMM",
               title=f"{g}: n={sel[0]['n']}, nnz={sel[0]['nnz']}")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(RESULTS / "kernels.json"))
    ap.add_argument("--quick", action="store_true", help="small graphs, for a smoke run")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--widths", type=int, nargs="+", default=[16, 32, 64, 128, 256])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    bw = copy_bandwidth()
    print(f"streaming copy bandwidth: {bw:.1f} GB/s (read + write, 1 thread)")
    rows = []
    for name, A in graphs(args.quick).items():
        rows += bench_graph(name, A, args.widths, args.threads, args.repeat)
    path = write_json(args.out, dict(machine=machine(), copy_bandwidth_gbs=bw, results=rows))
    plot(rows, path.with_suffix(".png"))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
