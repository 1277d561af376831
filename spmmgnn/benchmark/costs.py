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

**Two tiers** (``Machine.two_tier``, ``spmmgnn model --ranks-per-node K``): the sparse
algorithms' phases carry their tier (``volumes.Phase``); inside a node they cost ``alpha_intra,
beta_intra``, between nodes ``alpha, beta`` with the node's links shared by its ranks (the
max-rate model of ``spmmgnn.exchange.tiers``). A flat exchange's intra- and inter-node messages
travel at the same time (the slower part counts), the node-aware exchange's three legs one after
the other. The collectives of the other algorithms are priced at the network's alpha and beta as
before.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass

import numpy as np

from ..exchange.tiers import (
    NETWORKS,  # noqa: F401  (re-exported: costs.NETWORKS)
    DeviceLink,
    Network,
    device_host_seconds,
    inter_seconds,
    intra_seconds,
)
from .device_volumes import device_host_volumes, device_leg_modelled
from .volumes import Layout, Phase, Volumes, predict


@dataclass
class Machine:
    """The model's machine: the network's alpha (s per message) and beta (s per byte), the
    local kernel's rate (non-zeros x columns per second, one rank) and, for the two-tier
    model, the ranks per node and the intra-node alpha and beta (``nics`` network links per
    node; ``spmmgnn.exchange.tiers``). With a ``link`` every rank runs on a GPU behind it:
    ``rate`` is then the device's local product and each call adds the host <-> device leg."""

    alpha: float
    beta: float
    rate: float
    ranks_per_node: int | None = None
    alpha_intra: float | None = None
    beta_intra: float | None = None
    nics: int = 1
    link: DeviceLink | None = None   # one GPU per rank behind this host <-> device link
    link_name: str | None = None

    @property
    def two_tier(self) -> bool:
        return self.ranks_per_node is not None

    def network(self) -> Network:
        """The tiers as a ``tiers.Network`` (intra figures: the nominal shared memory's
        unless given)."""
        net = Network(self.alpha, self.beta, "", nics=self.nics)
        if self.alpha_intra is not None:
            net = dataclasses.replace(net, alpha_intra=self.alpha_intra)
        if self.beta_intra is not None:
            net = dataclasses.replace(net, beta_intra=self.beta_intra)
        return net


def phase_seconds(ph: Phase, m: Machine) -> np.ndarray:
    """Per-rank seconds of one phase: by its tier on a two-tier machine, else at the
    network's alpha and beta."""
    if m.two_tier and ph.tier == "intra":
        return intra_seconds(m.network(), ph.latency, ph.bytes)
    if m.two_tier and ph.tier == "inter":
        node = ph.bytes if ph.node_bytes is None else ph.node_bytes
        return inter_seconds(m.network(), ph.latency, ph.bytes, node, m.ranks_per_node)
    return m.alpha * np.asarray(ph.latency) + m.beta * np.asarray(ph.bytes)


def exchange_seconds(vol: Volumes, m: Machine) -> np.ndarray:
    """Per-rank seconds of a call's exchanges: phases of one step at the same time (the
    slower counts), steps one after the other. A two-tier machine prices the tier phases
    where the volume model has them."""
    phases = vol.tier_phases if m.two_tier and vol.tier_phases else vol.priced_phases()
    steps: dict = {}
    for k, ph in enumerate(phases):
        key = ("own", k) if ph.step < 0 else ("step", ph.step)
        t = phase_seconds(ph, m)
        steps[key] = t if key not in steps else np.maximum(steps[key], t)
    return sum(steps.values()) if steps else np.zeros(vol.sent.size)


def _log2(n: int) -> int:
    return int(math.ceil(math.log2(n))) if n > 1 else 0


def spmm_time(algorithm: str, layout: Layout, vol: Volumes, P: int, c: int, f: int,
              itemsize: int, m: Machine) -> dict:
    """Predicted seconds of one SpMM: the slowest rank's total and its parts."""
    local = vol.nnz * f / m.rate
    exchange = exchange_seconds(vol, m)
    allreduce = (2 * m.alpha * _log2(c) + 2 * m.beta * vol.allreduce * (c - 1) / c
                 if c > 1 else np.zeros(P))
    total = local + exchange + allreduce
    leg = (device_host_volumes(algorithm, layout, vol, P, c, f, itemsize)
           if m.link is not None else None)
    host = (device_host_seconds(m.link, leg.copies, leg.total) if leg is not None
            else np.zeros(P))
    total = total + host   # the copies are not credited with any overlap
    r = int(np.argmax(total))
    inter = vol.sent if vol.sent_inter is None else vol.sent_inter
    extra = {} if leg is None else dict(
        device_link=m.link_name, device_host=float(host[r]),
        max_device_host_bytes=int(leg.total.max()))
    return dict(seconds=float(total[r]), local=float(local[r]), exchange=float(exchange[r]),
                allreduce=float(allreduce[r]), **extra, max_bytes_sent=int(vol.sent.max()),
                avg_bytes_sent=float(vol.sent.mean()),
                max_allreduce_bytes=int(vol.allreduce.max()),
                inter_bytes_sent=int(inter.sum()), max_inter_bytes_sent=int(inter.max()))


def build_layout(A, k: int, partitioner: str = "none", seed: int = 0,
                 parts_per_node: int | None = None) -> Layout:
    """A's layout on k block rows by ``partitioner`` ('none': contiguous blocks;
    ``parts_per_node``: for the two-level methods, the block rows of one node)."""
    from ..partitioners import partition

    extra = {} if parts_per_node is None else dict(parts_per_node=parts_per_node)
    return Layout.build(A, partition(A, k, method=partitioner, seed=seed, **extra), k)


def cached_layout(layouts: dict, A, k: int, partitioner: str, seed: int, log=None,
                  parts_per_node: int | None = None) -> Layout:
    """``build_layout`` once per k (and parts per node of a two-level partitioner) in
    ``layouts`` (partitioning is the expensive part)."""
    from ..partitioners.twolevel import is_two_level

    key = (k, parts_per_node) if is_two_level(partitioner) else k
    if key not in layouts:
        t0 = time.perf_counter()
        layouts[key] = build_layout(A, k, partitioner, seed,
                                    parts_per_node if is_two_level(partitioner) else None)
        if log:
            log(f"layout k={k}: {time.perf_counter() - t0:.1f} s")
    return layouts[key]


def predict_all(A, Ps: list[int], cs: list[int], algorithms: list[str], f: int,
                itemsize: int, m: Machine, spmms_per_epoch: int, partitioner: str = "none",
                seed: int = 0, log=None, layouts: dict[int, Layout] | None = None,
                grids: list | None = None,
                exchanges: tuple[str, ...] = ("flat", "node"),
                parts_per_node: int | None = None) -> list[dict]:
    """Predictions for every runnable (P, c or grid shape, algorithm): one dict each
    (``grid``: the 2D/3D shape, else None). ``layouts`` (by k) is filled and reused when
    given; ``grids``: the 2D/3D shapes to model (default: closest to a square / cube);
    ``parts_per_node``: a ``twolevel:`` partitioner's block rows of one node (default: the
    ranks per node / c).

    On a two-tier machine (``m.ranks_per_node``) an algorithm with a halo exchange has one
    row per ``exchanges`` ("flat", "node"; ``exchange`` names it, None for the others).
    With a device link (``m.link``) only the families whose device leg is modelled
    (``device_volumes.device_leg_modelled``), with the flat exchange, each call adding its
    host <-> device leg over MPI."""
    from ..algorithms import ALGORITHMS
    from ..grid import format_shape
    from .volumes import grid_points

    layouts = {} if layouts is None else layouts
    K = m.ranks_per_node
    rows = []
    if m.link is not None:  # one GPU per rank: the families whose device leg is modelled
        algorithms = [a for a in algorithms if device_leg_modelled(a)]
    for P in Ps:
        for algo in algorithms:
            cls = ALGORITHMS.get(algo)
            options = (exchanges if K is not None and cls is not None and cls.takes_exchange
                       and m.link is None else (None,))  # a device grid: flat only
            for c, shape in grid_points(algo, P, cs, grids):
                per_node = (parts_per_node if parts_per_node is not None else
                            max(1, K // c) if K is not None else None)
                layout = cached_layout(layouts, A, P // c, partitioner, seed, log, per_node)
                for exchange in options:
                    vol = predict(algo, layout, P, c, f, itemsize, shape=shape,
                                  ranks_per_node=K, exchange=exchange or "flat")
                    t = spmm_time(algo, layout, vol, P, c, f, itemsize, m)
                    rows.append(dict(P=P, c=c, grid=shape and format_shape(shape),
                                     algorithm=algo, exchange_kind=exchange, f=f, **t,
                                     epoch_seconds=spmms_per_epoch * t["seconds"]))
    return sorted(rows, key=lambda r: (r["P"], r["c"]))


def exchange_notes(rows: list[dict]) -> list[str]:
    """Per (P, algorithm, grid): the node-aware exchange against the flat one, and the one
    ``exchange="auto"`` picks (the faster)."""
    flat = {(r["P"], r["algorithm"], r["c"], r["grid"]): r for r in rows
            if r.get("exchange_kind") == "flat"}
    out = []
    for r in rows:
        key = (r["P"], r["algorithm"], r["c"], r["grid"])
        if r.get("exchange_kind") != "node" or key not in flat:
            continue
        f = flat[key]
        pick = "node" if r["seconds"] < f["seconds"] else "flat"
        out.append(f"P={r['P']} {r['algorithm']} {r['grid'] or 'c=' + str(r['c'])}: "
                   f"node-aware {f['seconds'] / max(r['seconds'], 1e-30):.2f}x the flat "
                   f"exchange's speed, inter-node bytes "
                   f"{r['inter_bytes_sent'] / max(f['inter_bytes_sent'], 1):.2f}x; auto: {pick}")
    return out


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
    best (algorithm, c). An algorithm priced with both exchanges counts with the faster
    (what ``exchange="auto"`` runs)."""
    out = []
    for c in sorted({r["c"] for r in rows}):
        sel: dict = {}
        for r in rows:
            if r["c"] == c:
                key = (r["P"], r["algorithm"])
                sel[key] = min(sel.get(key, r["seconds"]), r["seconds"])
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
        how = f" {best['exchange_kind']} exchange" if best.get("exchange_kind") else ""
        out.append(f"P={P}: best {best['algorithm']} {best.get('grid') or 'c=' + str(best['c'])}"
                   f"{how} ({best['epoch_seconds'] * 1e3:.2f} ms/epoch)")
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
    from ..local.local_matrix import LocalCSR

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


def kept_rows(A, Ps: list[int], algorithms: list[str], f: int, itemsize: int, m: Machine,
              layers: int, partitioner: str = "none", seed: int = 0,
              layouts: dict[int, Layout] | None = None, grids: list | None = None,
              symmetric: bool | None = None, parts_per_node: int | None = None) -> list[dict]:
    """The training step in the kept layouts (``kept_volumes``: ``train --grid-layout``,
    ``--plexus-blocks``) of the ``algorithms`` that have one, at each P and grid: a GCN of
    ``layers`` layers f -> f -> ... -> f without the first-layer cache (``2 layers - 1``
    SpMMs, the first layer's input needing no gradient), its phases one after the other at
    the network's alpha and beta plus its local products at ``m.rate``; ``epoch_seconds``
    and the largest rank's bytes (``max_bytes_sent``: the algorithm's, ``max_convert_bytes``:
    the logits' conversions); ``row_step_seconds``: the same SpMM calls in the row layout
    (``predict``'s volumes, converting on every call, as ``spmm_time`` prices them);
    ``parts_per_node``: a ``twolevel:`` partitioner's block rows of one node."""
    from ..grid import format_shape
    from .kept_volumes import KEPT, kept_step
    from .volumes import grid_points

    layouts = {} if layouts is None else layouts
    if symmetric is None:
        symmetric = (A != A.T).nnz == 0
    dims = [f] * (layers + 1)
    rows = []
    for P in Ps:
        for algo in (a for a in algorithms if a in KEPT):
            for _, shape in grid_points(algo, P, [1], grids):
                layout = cached_layout(layouts, A, P, partitioner, seed,
                                       parts_per_node=parts_per_node)
                step = kept_step(algo, layout, P, dims, itemsize, symmetric, False, shape)
                local = step.work / m.rate
                total = local + sum(phase_seconds(ph, m) for ph in step.phases)
                r = int(np.argmax(total))
                row = {f: spmm_time(algo, layout, predict(algo, layout, P, 1, f, itemsize,
                                                          shape=shape), P, 1, f, itemsize,
                                    m)["seconds"] for f in {w for w, _ in step.calls}}
                rows.append(dict(P=P, c=1, grid=format_shape(shape), algorithm=f"{algo} kept",
                                 f=f, epoch_seconds=float(total[r]), local=float(local[r]),
                                 max_bytes_sent=int(step.algorithm.max()),
                                 avg_bytes_sent=float(step.algorithm.mean()),
                                 max_convert_bytes=int(step.convert.max()),
                                 row_step_seconds=sum(row[w] for w, _ in step.calls),
                                 spmms=len(step.calls), layout=KEPT[algo]))
    return rows
