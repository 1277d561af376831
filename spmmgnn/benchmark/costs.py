"""Predicted SpMM and epoch times: exact per-rank volumes (``volumes``) priced with the
alpha-beta model of ICPP'24 section 4, plus the measured local kernel rate.

Per rank r and call (the slowest rank sets the time, as in a bulk-synchronous step):

* sparse algorithms (one all-to-allv):  ``alpha * peers_r + beta * max(sent_r, received_r)``,
  the exact form of the paper's ``alpha (P-1) + (P-1) cut_P(G) f beta`` bound;
* oblivious algorithms: one broadcast per stage q of the replica over k = P/c ranks,
  ``alpha ceil(log2 k) + beta |X_q|`` (CAGNET's ``alpha P log P + beta n f`` for 1D);
* the 1.5D all-reduce of the local block (m bytes) over c replicas:
  ``2 alpha ceil(log2 c) + 2 beta m (c-1)/c`` (Rabenseifner);
* local product: ``nnz_r * f / rate`` with the rate (non-zeros x columns per second) of the
  numba kernel measured on this machine.

An epoch of an L-layer GCN is ``2L`` SpMMs of width f (forward and backward, no first-layer
cache, as in the paper's ``T = 2L (...)``); dense layers are not modelled.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from .volumes import Layout, Volumes, predict


@dataclass
class Machine:
    alpha: float        # seconds per message
    beta: float         # seconds per byte
    rate: float         # local kernel: non-zeros x columns per second (one rank)


@dataclass(frozen=True)
class Network:
    """A named interconnect for the model: per-message latency alpha (s) and seconds per
    byte beta between nodes. Nominal figures, not measurements: beta from the link's data
    rate, alpha the one-way MPI latency of a small message typical of the fabric
    (osu_latency-style ping-pong). ``spmmgnn bench --network`` measures a real machine."""

    alpha: float
    beta: float
    source: str


NETWORKS = {
    "ib-hdr": Network(1.5e-6, 1 / 25e9, "InfiniBand HDR, 200 Gb/s = 25 GB/s per direction "
                                        "per port; ~1.5 us MPI latency"),
    "ib-edr": Network(1.5e-6, 1 / 12.5e9, "InfiniBand EDR, 100 Gb/s = 12.5 GB/s; ~1.5 us"),
    "slingshot": Network(2.0e-6, 1 / 25e9, "HPE Slingshot 11, 200 Gb/s NIC = 25 GB/s; ~2 us"),
    "ethernet-25g": Network(10e-6, 1 / 3.125e9, "25 Gb Ethernet with TCP, 3.125 GB/s; "
                                                "~10 us through the kernel's stack"),
}


def _log2(n: int) -> int:
    return int(math.ceil(math.log2(n))) if n > 1 else 0


def spmm_time(algorithm: str, layout: Layout, vol: Volumes, P: int, c: int, f: int,
              itemsize: int, m: Machine) -> dict:
    """Predicted seconds of one SpMM: the slowest rank's total and its parts."""
    local = vol.nnz * f / m.rate
    exchange = sum(m.alpha * ph.latency + m.beta * ph.bytes for ph in vol.priced_phases())
    allreduce = (2 * m.alpha * _log2(c) + 2 * m.beta * vol.allreduce * (c - 1) / c
                 if c > 1 else np.zeros(P))
    total = local + exchange + allreduce
    r = int(np.argmax(total))
    return dict(seconds=float(total[r]), local=float(local[r]), exchange=float(exchange[r]),
                allreduce=float(allreduce[r]), max_bytes_sent=int(vol.sent.max()),
                avg_bytes_sent=float(vol.sent.mean()),
                max_allreduce_bytes=int(vol.allreduce.max()))


def build_layout(A, k: int, partitioner: str = "none", seed: int = 0) -> Layout:
    """A's layout on k block rows by ``partitioner`` ('none': contiguous blocks)."""
    from ..partitioners import partition

    return Layout.build(A, partition(A, k, method=partitioner, seed=seed), k)


def cached_layout(layouts: dict[int, Layout], A, k: int, partitioner: str, seed: int,
                  log=None) -> Layout:
    """``build_layout`` once per k in ``layouts`` (partitioning is the expensive part)."""
    if k not in layouts:
        t0 = time.perf_counter()
        layouts[k] = build_layout(A, k, partitioner, seed)
        if log:
            log(f"layout k={k}: {time.perf_counter() - t0:.1f} s")
    return layouts[k]


def predict_all(A, Ps: list[int], cs: list[int], algorithms: list[str], f: int,
                itemsize: int, m: Machine, spmms_per_epoch: int, partitioner: str = "none",
                seed: int = 0, log=None, layouts: dict[int, Layout] | None = None,
                grids: list | None = None) -> list[dict]:
    """Predictions for every runnable (P, c or grid shape, algorithm): one dict each
    (``grid``: the 2D/3D shape, else None). ``layouts`` (by k) is filled and reused when
    given; ``grids``: the 2D/3D shapes to model (default: closest to a square / cube)."""
    from ..grid import format_shape
    from .volumes import grid_points

    layouts = {} if layouts is None else layouts
    rows = []
    for P in Ps:
        for algo in algorithms:
            for c, shape in grid_points(algo, P, cs, grids):
                layout = cached_layout(layouts, A, P // c, partitioner, seed, log)
                vol = predict(algo, layout, P, c, f, itemsize, shape=shape)
                t = spmm_time(algo, layout, vol, P, c, f, itemsize, m)
                rows.append(dict(P=P, c=c, grid=shape and format_shape(shape), algorithm=algo,
                                 f=f, **t, epoch_seconds=spmms_per_epoch * t["seconds"]))
    return sorted(rows, key=lambda r: (r["P"], r["c"]))


def delayed_rows(A, Ps: list[int], r: int, f: int, itemsize: int, m: Machine, layers: int,
                 backward: str = "local", partitioner: str = "none", seed: int = 0,
                 layouts: dict[int, Layout] | None = None) -> list[dict]:
    """cd-r on sparse1d at each P (c = 1): an epoch makes ``layers`` forward and ``layers``
    transpose calls that all send bin ``epoch mod r``; the times are averaged over the r bins
    (r consecutive epochs). The forward prices like sparse1d's exchange with the bin's rows
    (no credit for the r epochs the transfer may overlap); the local backward sends nothing."""
    from .volumes import delayed_volumes

    layouts = {} if layouts is None else layouts
    rows = []
    for P in Ps:
        layout = cached_layout(layouts, A, P, partitioner, seed)
        vols = delayed_volumes(layout, P, r, f, itemsize, backward=backward)
        parts = []
        for vol in vols:
            back = Volumes(sent=vol.sent_t, received=vol.received_t, sent_t=vol.sent,
                           received_t=vol.received, allreduce=vol.allreduce, nnz=vol.nnz,
                           messages=vol.messages * (backward == "delayed"))
            for v in (vol, back):
                parts.append(spmm_time("sparse1d", layout, v, P, 1, f, itemsize, m))
        mean = {key: float(np.mean([t[key] for t in parts]))
                for key in ("seconds", "local", "exchange", "allreduce")}
        sent = np.mean([v.sent for v in vols], axis=0)
        rows.append(dict(P=P, c=1, algorithm=f"sparse1d cd-{r}", f=f, **mean,
                         max_bytes_sent=int(round(sent.max())),
                         avg_bytes_sent=float(sent.mean()), max_allreduce_bytes=0,
                         epoch_seconds=2 * layers * mean["seconds"], backward=backward))
    return rows


def crossovers(rows: list[dict]) -> list[str]:
    """Per c: the smallest P where the sparse algorithm beats the oblivious one; per P: the
    best (algorithm, c)."""
    out = []
    for c in sorted({r["c"] for r in rows}):
        sel = {(r["P"], r["algorithm"]): r["seconds"] for r in rows if r["c"] == c}
        pairs = [("sparse1d", "oblivious1d"), ("sparse2d", "oblivious2d"),
                 ("sparse3d", "oblivious3d")] if c == 1 else []
        pairs.append(("sparse15d", "oblivious15d"))
        for sparse, obl in pairs:
            Ps = sorted(P for P, a in sel if a == sparse and (P, obl) in sel)
            wins = [P for P in Ps if sel[(P, sparse)] < sel[(P, obl)]]
            if not Ps:
                continue
            if not wins:
                out.append(f"c={c}: {sparse} never beats {obl} at P in {Ps}")
            elif wins[0] == Ps[0] and len(wins) == len(Ps):
                out.append(f"c={c}: {sparse} beats {obl} at every P in {Ps}")
            elif wins == Ps[Ps.index(wins[0]):]:
                out.append(f"c={c}: {sparse} beats {obl} from P={wins[0]} on")
            else:
                out.append(f"c={c}: {sparse} beats {obl} only at P in {wins} of {Ps}")
    for P in sorted({r["P"] for r in rows}):
        best = min((r for r in rows if r["P"] == P), key=lambda r: r["seconds"])
        out.append(f"P={P}: best {best['algorithm']} {best.get('grid') or 'c=' + str(best['c'])} "
                   f"({best['epoch_seconds'] * 1e3:.2f} ms/epoch)")
    return out


def delayed_notes(exact: list[dict], stale: list[dict]) -> list[str]:
    """cd-r against exact sparse1d at each P: epoch time and bytes (cd-r is not a candidate
    for 'best': it changes the model's mathematics)."""
    base = {r["P"]: r for r in exact if r["algorithm"] == "sparse1d" and r["c"] == 1}
    out = []
    for r in stale:
        b = base.get(r["P"])
        if b is None:
            continue
        ratio = (r["avg_bytes_sent"] / b["avg_bytes_sent"] if b["avg_bytes_sent"]
                 else float("nan"))
        out.append(f"P={r['P']}: {r['algorithm']} ({r['backward']} backward) "
                   f"{r['epoch_seconds'] * 1e3:.2f} ms/epoch = "
                   f"{r['epoch_seconds'] / b['epoch_seconds']:.2f}x sparse1d's, sending "
                   f"{ratio:.2f}x its bytes per forward call")
    return out


def measure_rate(A, f: int, dtype="float32", repeat: int = 3) -> float:
    """Non-zeros x columns per second of the local numba kernel on A (this process's
    threads), best of ``repeat`` after a warm-up."""
    from ..local_matrix import LocalCSR

    L = LocalCSR(A)
    x = np.random.default_rng(0).standard_normal((A.shape[1], f)).astype(dtype)
    out = np.empty((A.shape[0], f), dtype=dtype)
    L.matmul(x, out, accumulate=False)
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        L.matmul(x, out, accumulate=False)
        best = min(best, time.perf_counter() - t0)
    return max(1.0, L.nnz * f / best)
