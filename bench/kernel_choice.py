"""The local kernel's automatic choice against every forced variant, torch and the gather bound.

Five kinds of matrix of 120-150k rows and 1.9-3.2M non-zeros (three with locality of
different widths: ``banded``, ``wideband``, ``mesh3d``; an R-MAT power-law graph; a uniform
random graph), float32, f in {16, 32, 64, 128, 256}, 2
threads. Per case, in one interleaved run (round robin, best of ``--repeat``):

- ``auto``: a fresh ``LocalCSR`` (kernel ``auto``): the variant its first call measured and
  chose, then its time; the seconds of that first call (the choice's cost) are reported too;
- every forced variant ``auto`` considers (``plain``, ``unrolled``, ``blocked:N``) and the
  cache model's pick (``rule``);
- ``torch.sparse.mm`` with a CSR tensor (``torch.set_num_threads`` the same);
- the same for ``A^T y``: ``auto`` (transpose vs scan timed on a row sample) against forced
  ``transpose`` and ``scan``, torch on the transposed CSR, and ``auto-whole`` (the same
  choice timed on the whole matrix; the first call's seconds of both are reported).

The gather bound: a numba kernel that only reads random rows of x (width f, the SpMM's
prefetch, one accumulator row per thread) from an x that fits in a quarter of the last-level
cache (L3) and from one 8x the cache (DRAM); its GB/s at each f. A case's bound is the time to
gather ``nnz`` random rows of its x at the rate of L3 if x fits in the last-level cache, else
of DRAM; ``share`` is that
bound over the kernel's time (a matrix with locality can beat a random-gather bound).

    python -m bench.kernel_choice [--quick] [--out bench/results/kernel-choice.json]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch

from bench import RESULTS
from bench.kernels import torch_csr
from spmmgnn import set_threads
from spmmgnn.benchmark.harness import interleaved, machine
from spmmgnn.benchmark.rates import WIDTHS, gather_rates
from spmmgnn.benchmark.tables import md_table, publish
from spmmgnn.data.generators import banded, random_graph, rmat
from spmmgnn.local import kernels, local_matrix
from spmmgnn.local.local_matrix import LocalCSR

MATRICES = ("banded", "wideband", "mesh3d", "powerlaw", "uniform")


def matrices(quick: bool, names=MATRICES) -> dict[str, sp.csr_array]:
    """The bench's matrices. Locality comes in three widths: ``banded`` (a row's columns
    within 2,000 of the diagonal: the rows of x it gathers stay in L2), ``wideband``
    (within 20,000: a window of 40k rows of x, in L3 up to f = 128 and past it at 256) and
    ``mesh3d`` (a 50^3 grid's 27-point stencil in its natural order: three bands at 1, 50
    and 2,500 rows)."""
    if quick:
        made = {"banded": lambda: banded(20_000, 16, 500, seed=1),
                "wideband": lambda: banded(20_000, 16, 5_000, seed=1),
                "mesh3d": lambda: stencil27(20),
                "powerlaw": lambda: sp.csr_array(rmat(14, 10, 1)),
                "uniform": lambda: sp.csr_array(random_graph(20_000, 16, seed=1))}
    else:
        made = {"banded": lambda: banded(150_000, 16, 2000, seed=1),          # 2.38M non-zeros
                "wideband": lambda: banded(120_000, 16, 20_000, seed=1),      # 1.92M
                "mesh3d": lambda: stencil27(50),                             # 125k rows, 3.2M
                "powerlaw": lambda: sp.csr_array(rmat(17, 10, seed=1)),     # 131k rows, 2.40M
                "uniform": lambda: sp.csr_array(random_graph(150_000, 17, seed=1))}  # 2.55M
    return {name: made[name]() for name in names}


def stencil27(m: int) -> sp.csr_array:
    """The 27-point stencil of an m^3 grid (each vertex and its 26 neighbours), natural
    order: a mesh's locality with three bands."""
    line = sp.diags([1.0, 1.0, 1.0], [-1, 0, 1], shape=(m, m))
    return sp.csr_array(sp.kron(sp.kron(line, line), line).tocsr())


def bound_seconds(A: sp.csr_array, f: int, rates: dict) -> tuple[float, str]:
    regime = "L3" if A.shape[1] * f * 4 <= kernels.LLC_BYTES else "DRAM"
    return A.nnz * f * 4 / (rates[regime][f] * 1e9), regime


def first_call(M: LocalCSR, call, whole: bool) -> float:
    """Seconds of ``M``'s first call (the inspector's choice included); ``whole`` times the
    candidates on the whole matrix instead of a row sample (the inspector before sampling)."""
    saved = local_matrix.SAMPLE_WORK
    if whole:
        local_matrix.SAMPLE_WORK = 1 << 62
    try:
        t0 = time.perf_counter()
        call()
        return time.perf_counter() - t0
    finally:
        local_matrix.SAMPLE_WORK = saved


def run_case(name: str, A: sp.csr_array, f: int, repeat: int, rates: dict) -> dict:
    rng = np.random.default_rng(f)
    X = rng.standard_normal((A.shape[1], f)).astype(np.float32)
    Y = rng.standard_normal((A.shape[0], f)).astype(np.float32)
    out = np.empty((A.shape[0], f), dtype=np.float32)
    out_t = np.empty((A.shape[1], f), dtype=np.float32)
    auto, whole = LocalCSR(A), LocalCSR(A)
    first = first_call(auto, lambda: auto.matmul(X, out, False), whole=False)
    whole.matmul(X, out, False)
    first_t = first_call(auto, lambda: auto.t_matmul(Y, out_t, False), whole=False)
    first_t_whole = first_call(whole, lambda: whole.t_matmul(Y, out_t, False), whole=True)
    choice, choice_t = (auto.choices[k] for k in auto.choices)
    fns = {"auto": lambda: auto.matmul(X, out, False)}
    forced = {}
    for variant in [*auto.candidates(f, 4), "rule"]:
        forced[variant] = LocalCSR(A)
        forced[variant].kernel = variant
        fns[variant] = lambda m=forced[variant]: m.matmul(X, out, False)
    At, Xt = torch_csr(A), torch.from_numpy(X)
    fns["torch"] = lambda: torch.sparse.mm(At, Xt)
    best = interleaved(fns, repeat)
    fns_t = {"auto": lambda: auto.t_matmul(Y, out_t, False),
             "auto-whole": lambda: whole.t_matmul(Y, out_t, False)}
    for variant in ("transpose", "scan"):
        forced[f"t:{variant}"] = LocalCSR(A)
        forced[f"t:{variant}"].kernel_t = variant
        fns_t[variant] = lambda m=forced[f"t:{variant}"]: m.t_matmul(Y, out_t, False)
    AtT, Yt = torch_csr(sp.csr_array(A.T.tocsr())), torch.from_numpy(Y)
    fns_t["torch"] = lambda: torch.sparse.mm(AtT, Yt)
    best_t = interleaved(fns_t, repeat)
    want, want_t = A.astype(np.float32) @ X, A.T.astype(np.float32) @ Y
    for m in [auto, whole, *forced.values()]:
        m.matmul(X, out, False)
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-3)
        m.t_matmul(Y, out_t, False)
        np.testing.assert_allclose(out_t, want_t, rtol=1e-4, atol=1e-3)
    rule_variant = next(iter(forced["rule"].choices.values())).variant
    variants = {k: v for k, v in best.items() if k not in ("auto", "torch", "rule")}
    fastest = min(variants, key=variants.get)
    fastest_t = min(("transpose", "scan"), key=best_t.get)
    bound, regime = bound_seconds(A, f, rates)
    return dict(graph=name, n=int(A.shape[0]), nnz=int(A.nnz), f=f, chosen=choice.variant,
                inspector_seconds=choice.seconds, first_call_seconds=first,
                rule_variant=rule_variant, seconds=best, fastest_forced=fastest,
                auto_vs_fastest=best["auto"] / variants[fastest],
                auto_vs_torch=best["auto"] / best["torch"],
                auto_vs_rule=best["auto"] / best["rule"],
                transpose=dict(chosen=choice_t.variant, sample=choice_t.sample,
                               chosen_whole=list(whole.choices.values())[1].variant,
                               inspector_seconds=choice_t.seconds,
                               first_call_seconds=first_t,
                               first_call_whole_seconds=first_t_whole, seconds=best_t,
                               fastest_forced=fastest_t,
                               auto_vs_fastest=best_t["auto"] / best_t[fastest_t],
                               auto_vs_torch=best_t["auto"] / best_t["torch"]),
                gather_bound_seconds=bound, gather_regime=regime,
                share_of_gather_bound=bound / best["auto"])


def choice_ratio(r: dict) -> float:
    """The chosen variant's forced time over the fastest forced time (1 = the best pick)."""
    s = r["seconds"]
    return s.get(r["chosen"], s["auto"]) / s[r["fastest_forced"]]


def render(data: dict) -> str:
    """The tables of a run from its JSON: the gather bound, then per matrix and width the
    choice against every forced variant, the inspector's cost, and ``A^T y``."""
    rates = {k: {int(f): v for f, v in r.items()} for k, r in data["gather_gb_per_s"].items()}
    rows = data["cases"]
    lines = ["Random-row gather bound (GB/s of rows read, 2 threads):", "",
             *md_table(["x in", *(f"f={f}" for f in WIDTHS)],
                       [[regime, *(f"{r[f]:.1f}" for f in WIDTHS)] for regime, r in rates.items()],
                       "l" + "r" * len(WIDTHS)),
             "", "`choice` = the forced time of the variant auto chose / the fastest forced "
             "time: the inspector's decision alone. `auto / fastest` also holds the spread "
             "between two instances of the same variant (auto's and the forced one's "
             "arrays), a few per cent on this machine.", ""]
    table = []
    for r in rows:
        s = r["seconds"]
        table.append([r["graph"], r["f"], r["chosen"], f"{s['auto'] * 1e3:.1f}",
                      f"{r['fastest_forced']} ({s[r['fastest_forced']] * 1e3:.1f})",
                      f"{r['rule_variant']}, {s['rule'] * 1e3:.1f}", f"{s['torch'] * 1e3:.1f}",
                      f"{choice_ratio(r):.2f}", f"{r['auto_vs_fastest']:.2f}",
                      f"{r['auto_vs_torch']:.2f}",
                      f"{r['share_of_gather_bound']:.0%} ({r['gather_regime']})"])
    lines += md_table(["matrix", "f", "auto chose", "auto ms", "fastest forced (ms)",
                       "rule: variant, ms", "torch ms", "choice", "auto / fastest",
                       "auto / torch", "share of gather bound"], table, "lrlrllrrrrr")
    lines += ["", "The inspector's cost: the first call of `auto` (timing every candidate on "
              "the whole matrix) against the steady call.", ""]
    lines += md_table(["matrix", "f", "first call ms", "steady ms"],
                      [[r["graph"], r["f"], f"{r['first_call_seconds'] * 1e3:.0f}",
                        f"{r['seconds']['auto'] * 1e3:.1f}"] for r in rows], "lrrr")
    lines += ["", "A^T y (`t_matmul`): transposed CSR vs scan, chosen on a sample.", ""]
    table = []
    for r in rows:
        t = r["transpose"]
        s = t["seconds"]
        table.append([r["graph"], r["f"], f"{t['chosen']} ({t['chosen_whole']})",
                      f"{s['auto'] * 1e3:.1f}", f"{s['transpose'] * 1e3:.1f}",
                      f"{s['scan'] * 1e3:.1f}", f"{s['torch'] * 1e3:.1f}",
                      f"{t['auto_vs_fastest']:.2f}", f"{t['auto_vs_torch']:.2f}",
                      f"{t['first_call_seconds'] * 1e3:.0f} "
                      f"({t['first_call_whole_seconds'] * 1e3:.0f})"])
    lines += md_table(["matrix", "f", "auto chose (whole)", "auto ms", "transpose ms",
                       "scan ms", "torch ms", "auto / fastest", "auto / torch",
                       "first call ms (whole)"], table, "lrlrrrrrrr")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="20k-row matrices (a smoke run)")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--matrices", nargs="+", default=list(MATRICES), choices=MATRICES)
    ap.add_argument("--out", default=str(RESULTS / "kernel-choice.json"))
    args = ap.parse_args()
    set_threads(args.threads)
    torch.set_num_threads(args.threads)
    rates = gather_rates(args.threads, args.repeat, args.quick)
    print("gather GB/s:", {k: {f: round(v, 1) for f, v in r.items()} for k, r in rates.items()},
          flush=True)
    rows = []
    for name, A in matrices(args.quick, args.matrices).items():
        for f in WIDTHS:
            rows.append(run_case(name, A, f, args.repeat, rates))
            r = rows[-1]
            print(f"{name} f={f}: auto {r['chosen']} {r['seconds']['auto'] * 1e3:.1f} ms, "
                  f"fastest {r['fastest_forced']} x{r['auto_vs_fastest']:.2f}, "
                  f"torch x{r['auto_vs_torch']:.2f}, bound {r['share_of_gather_bound']:.0%}",
                  flush=True)
    data = dict(machine=machine(), threads=args.threads, llc_bytes=kernels.LLC_BYTES,
                gather_gb_per_s=rates, cases=rows)
    paths = publish(Path(args.out).with_suffix(""), data, render)
    print(f"wrote {paths[0]} and {paths[1]}")


if __name__ == "__main__":
    main()
