"""What one rank keeps on its GPU on a device grid (``ProcessGrid(device=...)``), predicted
from the partition alone, and whether it fits a device of a given size
(``spmmgnn model --memory --device-memory GiB``).

The families projected are those of ``device_volumes.device_leg_modelled`` (1D and 1.5D);
the others run on a device grid too but are not projected here.

* ``blocks``: the operator's local blocks as torch sparse CSR on the device
  (``backend.torch_backend.TorchBlock``: int32 row pointers and column indices below 2^31,
  values in the training dtype), built on first use and never while it is empty; the
  transposed copies ``matmul_t`` builds, on a non-symmetric A; and the index tensor of the
  rows the halo plan sends (int64). Exact (tested) except prepost1d's M_recv and M_send,
  estimated from the cover sizes as ``benchmark.memory`` does;
* ``exchange``: the device tensors of one call at the widest width the SpMM runs: the rows
  gathered to send and the rows received (sparse; prepost1d also M_send X), or the largest
  stage block received (oblivious), and the call's output;
* ``training``: the dense part of a GCN's training (``nn.memory.dense_bytes``: features,
  activations, gradients, weights and Adam's moments), which ``train --device`` keeps there.

The host keeps the staging buffers. Not counted: CUDA's context and torch's caching
allocator (a few hundred MiB a process, measured by neither this model nor the CPU one).
"""

from __future__ import annotations

import numpy as np

from ..nn.memory import DENSE, ModelShape, dense_bytes
from ..runtime.errors import SpmmgnnError
from ..runtime.machine import format_bytes_apart
from ..stages import stage_ranges
from .device_volumes import OBLIVIOUS, device_leg_modelled
from .volumes import Layout, predict

DEVICE_PARTS = ("blocks", "exchange", "training")
INDEX = 4   # torch CSR indices on the device: int32 below 2^31 (torch_backend.csr_tensor)
GIB = 2**30


def _csr(rows, nnz, itemsize: int, built=True) -> np.ndarray:
    """Bytes of torch CSR blocks of ``rows`` rows and ``nnz`` non-zeros (0 where not
    ``built``, and where empty: ``TorchBlock`` builds no CSR for a block without
    non-zeros)."""
    nnz = np.asarray(nnz)
    return np.where(np.asarray(built) & (nnz > 0),
                    INDEX * (np.asarray(rows) + 1) + nnz * (INDEX + itemsize), 0)


def _stages(layout: Layout, P: int, c: int):
    """Per rank: its block row i, its rows, and the mask of its replica's block columns."""
    k = P // c
    i, j = np.divmod(np.arange(P), c)
    b = stage_ranges(k, c)
    q = np.arange(k)
    mask = (q[None, :] >= b[j][:, None]) & (q[None, :] < b[j + 1][:, None])
    return i, layout.sizes[i].astype(np.int64), mask


def device_blocks(algorithm: str, layout: Layout, P: int, c: int, itemsize: int,
                  transposes: bool) -> np.ndarray:
    """Per-rank bytes of the operator's device copies after a ``matmul`` (and, with
    ``transposes``, a ``matmul_t``): its CSR blocks and the send-row index tensor."""
    i, rows, mask = _stages(layout, P, c)
    N = layout.block_nnz()
    if algorithm in OBLIVIOUS:
        sizes = layout.sizes.astype(np.int64)
        nnz = N[i]
        total = (_csr(rows[:, None], nnz, itemsize, mask & (nnz > 0))).sum(axis=1)
        if transposes:
            total = total + _csr(sizes[None, :], nnz, itemsize, mask).sum(axis=1)
        return total
    v = predict(algorithm, layout, P, c, 1, 1)
    ghost, send = v.received.astype(np.int64), v.sent.astype(np.int64)
    own = np.where(mask[np.arange(P), i], N[i, i], 0)
    far = (N[i] * mask).sum(axis=1) - own
    if algorithm == "prepost1d":  # M_recv, M_send estimated as the CPU memory model does
        post, pre = far + ghost, send
        total = (_csr(rows, own, itemsize) + _csr(rows, post, itemsize, post > 0)
                 + _csr(send, pre, itemsize) + 8 * send)
        if transposes:
            total = total + (_csr(rows, own, itemsize) + _csr(ghost, post, itemsize)
                             + _csr(rows, pre, itemsize, pre > 0))
        return total
    total = _csr(rows, own, itemsize) + _csr(rows, far, itemsize, far > 0) + 8 * send
    if transposes:
        total = total + _csr(rows, own, itemsize) + _csr(ghost, far, itemsize)
    return total


def device_exchange(algorithm: str, layout: Layout, P: int, c: int, width: int,
                    itemsize: int) -> np.ndarray:
    """Per-rank bytes of one call's device tensors at ``width`` columns: the rows sent and
    received (sparse) or the largest stage block received (oblivious), and the output."""
    i, rows, mask = _stages(layout, P, c)
    if algorithm in OBLIVIOUS:
        others = mask & (np.arange(P // c)[None, :] != i[:, None])
        moved = (layout.sizes[None, :].astype(np.int64) * others).max(axis=1, initial=0)
    else:
        v = predict(algorithm, layout, P, c, 1, 1)
        moved = v.received.astype(np.int64) + v.sent.astype(np.int64) * (
            2 if algorithm == "prepost1d" else 1)
    return (moved + rows) * width * itemsize


def device_memory(algorithm: str, layout: Layout, P: int, c: int, shape: ModelShape,
                  symmetric: bool = True) -> dict[str, np.ndarray]:
    """Per-rank bytes of ``DEVICE_PARTS`` and their ``total`` while training ``shape`` on a
    device grid (``symmetric``: A^T y runs as A y, so no transposed blocks)."""
    if not device_leg_modelled(algorithm):
        raise SpmmgnnError(f"{algorithm}'s device memory is not projected (the 1D and 1.5D "
                           "families are)")
    s = shape.itemsize
    width = max(w for w, _ in shape.spmm_widths())
    _, rows, _ = _stages(layout, P, c)
    dense = dense_bytes(shape, rows)
    out = dict(blocks=device_blocks(algorithm, layout, P, c, s, not symmetric),
               exchange=device_exchange(algorithm, layout, P, c, width, s),
               training=sum(np.asarray(dense[k], dtype=np.int64) for k in DENSE))
    out = {k: np.broadcast_to(np.asarray(v, dtype=np.int64), (P,)).copy()
           for k, v in out.items()}
    out["total"] = sum(out[k] for k in DEVICE_PARTS)
    return out


def fit_verdict(m: dict[str, np.ndarray], capacity: float) -> str:
    """"fits" or which ranks do not, with what they need (``capacity`` in bytes): the
    operator's blocks and exchange alone, and with the training's dense part."""
    spmm = m["blocks"] + m["exchange"]
    over = np.flatnonzero(m["total"] > capacity)
    if over.size == 0:
        return "fits"
    r = int(over[np.argmax(m["total"][over])])
    ranks = ", ".join(map(str, over[:8])) + (" ..." if over.size > 8 else "")
    what = ("the operator's blocks and exchange alone do not fit"
            if spmm[r] > capacity else "the SpMM fits, the training's dense part does not")
    need, have, *parts = format_bytes_apart(m["total"][r], capacity,
                                            *(m[k][r] for k in DEVICE_PARTS))
    return (f"does not fit on rank(s) {ranks}: rank {r} needs {need} > {have} ("
            + ", ".join(f"{k} {v}" for k, v in zip(DEVICE_PARTS, parts, strict=True))
            + f"); {what}")


def device_rows(A, Ps: list[int], cs: list[int], algorithms: list[str], shape: ModelShape,
                capacity: float, partitioner: str = "none",
                layouts: dict | None = None, parts_per_node: int | None = None) -> list[dict]:
    """For every (P, c, algorithm) projected onto GPUs (``device_leg_modelled``; the
    others are left out): the largest rank's bytes of
    ``DEVICE_PARTS`` and whether every rank fits ``capacity`` bytes (``verdict``)."""
    from .costs import cached_layout
    from .volumes import grid_points

    layouts = {} if layouts is None else layouts
    symmetric = (A != A.T).nnz == 0
    rows = []
    for P in Ps:
        for algo in filter(device_leg_modelled, algorithms):
            for c, _ in grid_points(algo, P, cs, None):
                layout = cached_layout(layouts, A, P // c, partitioner, 0,
                                       parts_per_node=parts_per_node)
                m = device_memory(algo, layout, P, c, shape, symmetric)
                r = int(np.argmax(m["total"]))
                rows.append(dict(P=P, c=c, algorithm=algo, rank=r, capacity=int(capacity),
                                 **{f"device_{k}": int(v[r]) for k, v in m.items()},
                                 fits=bool((m["total"] <= capacity).all()),
                                 verdict=fit_verdict(m, capacity)))
    return rows


def format_device(rows: list[dict], header: bool = True) -> str:
    """The device table of ``spmmgnn model --memory --device-memory`` (MiB, the largest
    rank), each row with its verdict."""
    lines = [f"{'P':>5} {'grid':>7} {'algorithm':>15} {'blocks':>9} {'exchange':>9} "
             f"{'training':>9} {'total':>9}  on the device"] if header else []
    for r in rows:
        lines.append(f"{r['P']:>5} {'c=' + str(r['c']):>7} {r['algorithm']:>15} "
                     + " ".join(f"{r['device_' + k] / 2**20:>9.1f}"
                                for k in (*DEVICE_PARTS, "total"))
                     + f"  {r['verdict']}")
    return "\n".join(lines)
