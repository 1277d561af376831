"""Per-rank bytes of one GCN training step with the activations kept in the algorithm's
blocks, predicted from the partition alone: ``train --grid-layout`` (``oblivious2d`` /
``oblivious3d``, ``nn/grid_model.py``, as CAGNET trains) and ``train --plexus-blocks K``
(``plexus3d``, ``nn/plexus_model.py``, as Plexus trains).

Counted as ``comm_stats()`` counts them (``bytes_sent_by_phase``): the algorithm's bytes are
the SpMM calls without conversions (``summa_volumes`` / ``plexus_volumes`` with
``convert=False``) and the dense product's moves (SUMMA: the all-gather of a block's
feature blocks along the process row before ``H W`` and of the output gradient in the
backward; Plexus: the reduce-scatter of ``H W``'s partial product along y and the all-gather
of its gradient); the conversions are the logits, blocks to rows, and their gradient back.
The layers follow the trainer: ``aggregate_first`` picks ``(A H) W`` or ``A (H W)``, the
first layer's input needs no gradient (SUMMA with the cache: its ``A X`` is gathered once,
so the layer moves nothing), the backward SpMM is ``A^T G`` (``A G`` on a symmetric A), and
``plexus3d``'s layer l uses tile ``T(l mod 2)`` (``T1`` moves what ``T0``'s transpose does).
Row blocks (``K``) split the reduce-scatter, not its bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..algorithms.plexus3d import plexus_blocks, plexus_orders
from ..nn.layers import aggregate_first
from ..stages import stage_ranges
from .volumes import (
    Layout,
    Phase,
    _coords,
    grid_shape,
    log2_ceil,
    plexus_conversion,
    plexus_counts,
    plexus_volumes,
    summa_volumes,
)

KEPT = {"oblivious2d": "grid", "oblivious3d": "grid", "plexus3d": "plexus"}


@dataclass
class StepBytes:
    """One training step per rank: bytes sent by phase, and its moves for the time model
    (``phases``, one after the other; ``work``: non-zeros x columns multiplied)."""

    algorithm: np.ndarray
    convert: np.ndarray
    work: np.ndarray
    phases: list[Phase] = field(default_factory=list)
    calls: list[tuple[int, bool]] = field(default_factory=list)   # SpMMs: (width, transposed)

    def add(self, name: str, sent, received, rounds, convert: bool = False) -> None:
        sent, received = np.asarray(sent, dtype=np.int64), np.asarray(received, dtype=np.int64)
        if convert:
            self.convert = self.convert + sent
        else:
            self.algorithm = self.algorithm + sent
        self.phases.append(Phase(name, np.broadcast_to(rounds, sent.shape),
                                 np.maximum(sent, received)))


def _layers(dims: list[int], cache: bool):
    """(layer, f_in, f_out, input needs a gradient, aggregate first) of each layer."""
    for i, (f_in, f_out) in enumerate(zip(dims[:-1], dims[1:], strict=True)):
        needs = i > 0
        yield i, f_in, f_out, needs, aggregate_first(f_in, f_out, needs, True)


def grid_step(layout: Layout, P: int, dims: list[int], itemsize: int = 4, symmetric=True,
              cache: bool = True, shape=None, ndim: int = 2) -> StepBytes:
    """``train --grid-layout`` on ``oblivious2d`` (``ndim`` 2) / ``oblivious3d`` (3)."""
    pr, pc, pl = grid_shape(P, shape, ndim)
    i, j, l = _coords((pr, pc, pl), np.arange(P))
    U = layout.sizes.astype(np.int64).reshape(pr, pc, pl).sum(axis=1)[i, l]   # |U_il|
    zero = np.zeros(P, dtype=np.int64)
    step = StepBytes(zero, zero, zero)
    vols: dict = {}

    def spmm(f: int, back: bool) -> None:
        if f not in vols:
            vols[f] = summa_volumes(layout, P, 1, f, itemsize, shape=(pr, pc, pl)[:ndim],
                                    ndim=ndim, convert=False)
        v = vols[f]
        step.work = step.work + v.nnz * f
        step.calls.append((f, back))
        if back and not symmetric:
            step.add("A^T G", v.sent_t, v.received_t, v.messages)
        else:   # A H, or A G on a symmetric A: the forward's stages
            step.phases += v.phases
            step.algorithm = step.algorithm + v.sent

    def gather(f: int) -> None:
        fj = np.diff(stage_ranges(f, pc))[j]
        step.add("all-gather along the process row", U * fj * itemsize * (pc - 1),
                 U * (f - fj) * itemsize, log2_ceil(pc))

    for layer, f_in, f_out, needs, agg in _layers(dims, cache):
        if layer == 0 and cache:
            continue   # the cached A X, gathered once: a local product
        if agg:
            spmm(f_in, False)
            gather(f_in)
            if needs:
                gather(f_out)
                spmm(f_in, True)
        else:
            gather(f_in)
            spmm(f_out, False)
            spmm(f_out, True)
            if needs:
                gather(f_out)
    c = dims[-1]
    full = summa_volumes(layout, P, 1, c, itemsize, shape=(pr, pc, pl)[:ndim], ndim=ndim)
    kept = summa_volumes(layout, P, 1, c, itemsize, shape=(pr, pc, pl)[:ndim], ndim=ndim,
                         convert=False)
    for ph in (full.phases[0], full.phases[-1]):   # the logits to rows, their gradient back
        step.phases.append(ph)
    step.convert = step.convert + (full.sent - kept.sent)
    return step


def plexus_step(layout: Layout, P: int, dims: list[int], itemsize: int = 4,
                shape=None) -> StepBytes:
    """``train --plexus-blocks K`` on ``plexus3d`` (any K: the same bytes)."""
    X, Y, Z = grid_shape(P, shape, 3)
    x, y, z = _coords((X, Y, Z), np.arange(P))
    n = int(layout.offsets[-1])
    bounds = plexus_blocks((X, Y, Z), n, n)[0]
    s_b = np.diff(bounds)[z * X + x]                       # the rows of my block of V
    zero = np.zeros(P, dtype=np.int64)
    step = StepBytes(zero, zero, zero)
    vols: dict = {}

    def aggregate(tile: int, f: int, back: bool) -> None:
        if f not in vols:
            vols[f] = plexus_volumes(layout, P, 1, f, itemsize, shape=(X, Y, Z),
                                     convert=False)
        v = vols[f]
        step.work = step.work + v.nnz * f
        step.calls.append((f, back))
        # T1 moves what T0's transpose moves (x and z swapped), and T1^T what T0 does
        if tile == back:
            step.add("gather along z, reduce-scatter along x", v.sent, v.received,
                     v.messages)
        else:
            step.add("gather along x, reduce-scatter along z", v.sent_t, v.received_t,
                     v.messages)

    def gemm(f_out: int, back: bool) -> None:
        g = np.diff(stage_ranges(f_out, Y))[y] * itemsize
        out = (s_b * (f_out * itemsize - g), s_b * g * (Y - 1))   # the reduce-scatter
        step.add("H W along y", *(out[::-1] if back else out), log2_ceil(Y))

    for layer, f_in, f_out, needs, agg in _layers(dims, cache=False):
        tile = layer % 2
        if agg:
            aggregate(tile, f_in, False)
            gemm(f_out, False)
            gemm(f_out, True)
            if needs:
                aggregate(tile, f_in, True)
        else:
            gemm(f_out, False)
            aggregate(tile, f_out, False)
            aggregate(tile, f_out, True)
            gemm(f_out, True)
    c = dims[-1]
    row_pos, _ = plexus_orders(n, n)
    w = np.diff(stage_ranges(c, Y))[y] * itemsize
    sent, received = plexus_conversion(layout, plexus_counts(layout, row_pos, bounds),
                                       z * X + x, np.diff(bounds), w, c * itemsize)
    step.add("logits to rows", received, sent, 1, convert=True)
    step.add("their gradient to blocks", sent, received, 1, convert=True)
    return step


def kept_step(algorithm: str, layout: Layout, P: int, dims: list[int], itemsize: int = 4,
              symmetric: bool = True, cache: bool = True, shape=None) -> StepBytes:
    """The training step of ``algorithm`` in its kept layout (``KEPT``)."""
    if algorithm == "plexus3d":
        return plexus_step(layout, P, dims, itemsize, shape)
    return grid_step(layout, P, dims, itemsize, symmetric, cache, shape,
                     ndim=int(algorithm[-2]))
