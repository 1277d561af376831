"""Exact per-rank bytes of every SpMM algorithm, predicted from the partition alone (no MPI).

The conventions are those of ``comm_stats()`` (docs/spmm-api.md "Bytes accounting",
docs/algorithms/index.md "1.5D stages"):

* ``bytes_sent`` / ``bytes_received``: rows crossing between ranks in the row exchange, never
  a rank's own rows; a broadcast root counts its block once per receiving peer, a reduce
  root receives one block per peer;
* ``allreduce_bytes``: the 1.5D row all-reduce, the local block (rows x f x itemsize) per call
  when c > 1, nothing when c = 1;
* rank ``r`` sits at block row ``r // c`` and replica ``r % c``; replica j multiplies the
  block columns ``stages_of(k, c, j)`` with ``k = P / c``.

Every function takes a :class:`Layout` (the relabelled matrix and its block offsets) and
returns a :class:`Volumes` of per-rank integer arrays for one ``matmul`` and one
``matmul_t``. ``VOLUMES`` maps an algorithm name to its function; other algorithms register
theirs with :func:`register_volume`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from functools import partial

import numpy as np

from ..algorithms import ALGORITHMS
from ..exchange.nodes import node_of_rank
from ..runtime.errors import SpmmgnnError
from ..stages import stage_ranges
from .grid_volumes import (  # noqa: F401 (the names callers import from here)
    _coords,
    _expand_fold_rows,
    grid_metrics,
    grid_shape,
    plexus_conversion,
    plexus_counts,
    plexus_tile_nnz,
    plexus_volumes,
    sparse_grid_volumes,
    summa_volumes,
)
from .node_volumes import Needs, algorithm_needs, exchange_rows, tier_bytes
from .summa_tiers import summa_inter
from .volume_layout import (  # noqa: F401
    Layout,
    Phase,
    Volumes,
    _allreduce,
    block_pairs,
    log2_ceil,
    row_bytes,
)


def _replicas(P: int, c: int) -> tuple[int, np.ndarray, np.ndarray]:
    if c < 1 or P % c:
        raise SpmmgnnError(f"replication c={c} must divide P={P}")
    k = P // c
    r = np.arange(P)
    return k, r // c, r % c


def stage_mask(k: int, c: int) -> np.ndarray:
    """``M[j, q]``: replica j multiplies block column q."""
    b = stage_ranges(k, c)
    q = np.arange(k)
    return (q[None, :] >= b[:-1, None]) & (q[None, :] < b[1:, None])


def sparse_volumes(layout: Layout, P: int, c: int, f: int, itemsize: int = 4,
                   codec: str | None = None, codec_backward: str | None = "same") -> Volumes:
    """sparse1d (c = 1) and sparse15d: rank (i, j) fetches NnzCols(i, q) from (q, j) for the
    block columns q of its stages; the transpose sends the same rows back as partial sums."""
    k, i, j = _replicas(P, c)
    if layout.k != k:
        raise SpmmgnnError(f"the partition has {layout.k} blocks; P/c = {k} expected")
    V = layout.pair_volume()
    M = stage_mask(k, c)
    rb = row_bytes(f, itemsize, codec)
    rbt = rb if codec_backward == "same" else row_bytes(f, itemsize, codec_backward)
    recv_rows = (V[i] * M[j]).sum(axis=1)          # rows rank (i, j) fetches
    # rows block i sends to all block rows l (V[l, i]), if block column i is j's stage
    send_rows = np.where(M[j, i], V[:, i].sum(axis=0), 0)
    peers_in = ((V[i] * M[j]) > 0).sum(axis=1)
    peers_out = np.where(M[j, i], (V[:, i] > 0).sum(axis=0), 0)
    N = layout.block_nnz()
    return Volumes(sent=send_rows * rb, received=recv_rows * rb, sent_t=recv_rows * rbt,
                   received_t=send_rows * rbt, allreduce=_allreduce(layout, i, c, f, itemsize),
                   nnz=(N[i] * M[j]).sum(axis=1), messages=np.maximum(peers_in, peers_out))


def delayed_volumes(layout: Layout, P: int, r: int, f: int, itemsize: int = 4,
                    codec: str | None = None, backward: str = "local") -> list[Volumes]:
    """cd-r on sparse1d (``algorithms.delayed``), one ``Volumes`` per bin b = t mod r of call
    t: block row i's V[i, q] ghost rows from block q are dealt round-robin over the bins, so
    bin b holds ``V // r + (b < V mod r)`` of them. The backward sends nothing (``local``)
    or the same bin's partial sums (``delayed``). Calls t >= r also land, but never send,
    more; a training epoch of L layers makes L such calls."""
    full = sparse_volumes(layout, P, 1, f, itemsize, codec)
    V = layout.pair_volume()
    rb = row_bytes(f, itemsize, codec)
    out = []
    for b in range(r):
        Vb = V // r + (b < V % r)
        sent, received = Vb.sum(axis=0) * rb, Vb.sum(axis=1) * rb
        back = backward == "delayed"
        out.append(Volumes(sent=sent, received=received, sent_t=received * back,
                           received_t=sent * back, allreduce=full.allreduce, nnz=full.nnz,
                           messages=np.maximum((Vb > 0).sum(axis=0), (Vb > 0).sum(axis=1))))
    return out


def prepost_volumes(layout: Layout, P: int, c: int, f: int, itemsize: int = 4,
                    codec: str | None = None, codec_backward: str | None = "same") -> Volumes:
    """prepost1d: block q sends block row i the minimum-vertex-cover rows of the cut A_iq
    (X rows for covered columns, partial sums for covered rows); the transpose mirrors it."""
    if c != 1:
        raise SpmmgnnError("prepost1d is one-dimensional: c must be 1")
    k = P
    if layout.k != k:
        raise SpmmgnnError(f"the partition has {layout.k} blocks; P = {k} expected")
    C = layout.cover_volume()
    rb = row_bytes(f, itemsize, codec)
    rbt = rb if codec_backward == "same" else row_bytes(f, itemsize, codec_backward)
    recv_rows, send_rows = C.sum(axis=1), C.sum(axis=0)
    peers = np.maximum((C > 0).sum(axis=1), (C > 0).sum(axis=0))
    return Volumes(sent=send_rows * rb, received=recv_rows * rb, sent_t=recv_rows * rbt,
                   received_t=send_rows * rbt, allreduce=np.zeros(k, dtype=np.int64),
                   nnz=layout.block_nnz().sum(axis=1), messages=peers)


def oblivious_volumes(layout: Layout, P: int, c: int, f: int, itemsize: int = 4,
                      codec: str | None = None, codec_backward: str | None = "same") -> Volumes:
    """oblivious1d (c = 1) and oblivious15d: in stage q the owner (q, j) broadcasts block row
    q to the k - 1 other ranks of replica j (across block rows); the transpose reduces onto it."""
    if codec not in (None, "none"):
        raise SpmmgnnError("the oblivious algorithms broadcast whole blocks: no codec")
    k, i, j = _replicas(P, c)
    if layout.k != k:
        raise SpmmgnnError(f"the partition has {layout.k} blocks; P/c = {k} expected")
    M = stage_mask(k, c)
    block = layout.sizes * f * itemsize             # bytes of block row q
    mine = M[j, i]                                  # my own block is one of my stages
    root_fan = np.where(mine, (k - 1) * block[i], 0)
    others = (M[j] * block[None, :]).sum(axis=1) - np.where(mine, block[i], 0)
    N = layout.block_nnz()
    stages = M[j].sum(axis=1)
    # one broadcast tree over the k ranks of the replica per stage; every rank moves each
    # stage's block once (CAGNET's alpha P log P + beta n f for 1D)
    tree = log2_ceil(k)
    broadcasts = Phase("broadcasts", stages * tree, (M[j] * block[None, :]).sum(axis=1)
                       if k > 1 else np.zeros(P, dtype=np.int64))
    return Volumes(sent=root_fan, received=others, sent_t=others, received_t=root_fan,
                   allreduce=_allreduce(layout, i, c, f, itemsize),
                   nnz=(N[i] * M[j]).sum(axis=1),
                   messages=np.where(k > 1, stages, 0), phases=[broadcasts])


def featureparallel_volumes(layout: Layout, P: int, c: int, f: int, itemsize: int = 4,
                           codec: str | None = None,
                           codec_backward: str | None = "same") -> Volumes:
    """featureparallel: rank p owns feature columns ``f // P + (p < f % P)`` and sends
    ``n_p (f - f_p) + (n - n_p) f_p`` elements per call (two all-to-alls; square A, so the
    transpose is the same); it multiplies all of A with its f_p columns."""
    if c != 1:
        raise SpmmgnnError("featureparallel splits features over all P ranks: c must be 1")
    if layout.k != P:
        raise SpmmgnnError(f"the partition has {layout.k} blocks; P = {P} expected")
    fp = f // P + (np.arange(P) < f % P)
    n_p = layout.sizes.astype(np.int64)
    n = int(n_p.sum())
    sent = (n_p * (f - fp) + (n - n_p) * fp) * itemsize
    work = np.rint(int(layout.block_nnz().sum()) * fp / max(f, 1)).astype(np.int64)
    return Volumes(sent=sent, received=sent.copy(), sent_t=sent.copy(), received_t=sent.copy(),
                   allreduce=np.zeros(P, dtype=np.int64), nnz=work,
                   messages=np.full(P, 2 * (P - 1)))


VolumeFn = Callable[..., Volumes]
VOLUMES: dict[str, VolumeFn] = {
    "oblivious1d": oblivious_volumes, "oblivious15d": oblivious_volumes,
    "sparse1d": sparse_volumes, "sparse15d": sparse_volumes, "prepost1d": prepost_volumes,
    "featureparallel": featureparallel_volumes,
    "oblivious2d": partial(summa_volumes, ndim=2), "sparse2d": partial(sparse_grid_volumes, ndim=2),
    "oblivious3d": partial(summa_volumes, ndim=3), "sparse3d": partial(sparse_grid_volumes, ndim=3),
    "plexus3d": plexus_volumes,
}
# from the algorithms' own capability attributes; register_volume adds others
ONE_D = {name for name, cls in ALGORITHMS.items() if "1.5d" not in cls.grid_kinds}
GRID_ALGORITHMS = {name: ndim for name, cls in ALGORITHMS.items()
                   for ndim, kind in ((2, "2d"), (3, "3d")) if kind in cls.grid_kinds}
CODEC_ALGORITHMS = {name for name, cls in ALGORITHMS.items() if cls.takes_codecs}


def grid_points(algorithm: str, P: int, replication: list[int],
                shapes: list | None = None) -> list[tuple[int, tuple[int, ...] | None]]:
    """(c, grid shape) of every grid ``algorithm`` runs on at P ranks: the values of c that
    divide P (1D and 1.5D; c = 1 only for a 1D algorithm), or the 2D/3D ``shapes`` of its
    dimension whose product is P (none given: the factors of P closest to a square or
    cube). Sweeps, the time model and the memory model enumerate their points with it."""
    from ..grid import near_square, parse_grid

    ndim = GRID_ALGORITHMS.get(algorithm)
    if ndim is None:
        return [(int(c), None) for c in replication
                if int(c) <= P and P % int(c) == 0 and (int(c) == 1 or algorithm not in ONE_D)]
    given = [parse_grid(s) if isinstance(s, str) else tuple(s) for s in shapes or []]
    mine = [s for s in given if len(s) == ndim]
    if not mine:
        return [(1, near_square(P, ndim))]
    return [(1, s) for s in mine if int(np.prod(s)) == P]


def register_volume(name: str, fn: VolumeFn, one_dimensional: bool = False,
                    codecs: bool = False) -> None:
    """Add the volume model of another algorithm (e.g. ``prepost1d``, ``featureparallel``).

    ``fn(layout, P, c, f, itemsize, codec, codec_backward) -> Volumes``.
    """
    VOLUMES[name] = fn
    if one_dimensional:
        ONE_D.add(name)
    if codecs:
        CODEC_ALGORITHMS.add(name)


def predict(algorithm: str, layout: Layout, P: int, c: int, f: int, itemsize: int = 4,
            codec: str | None = None, codec_backward: str | None = "same",
            shape: tuple[int, ...] | None = None, ranks_per_node: int | None = None,
            exchange: str = "flat") -> Volumes:
    """Per-rank volumes of ``algorithm`` on a ``P/c x c`` grid, or on the 2D/3D grid
    ``shape`` (None: the factors of P closest to a square or cube).

    With ``ranks_per_node`` K (consecutive ranks, as ``ProcessGrid(ranks_per_node=K)``) the
    sparse algorithms' bytes are split by tier (``sent_inter``...) and ``tier_phases`` filled;
    ``exchange="node"`` predicts the node-aware exchange (its totals and its phases)."""
    vol = _predict(algorithm, layout, P, c, f, itemsize, codec, codec_backward, shape)
    if ranks_per_node is not None or exchange != "flat":
        vol = with_tiers(vol, algorithm, layout, P, c, f, itemsize, codec, codec_backward,
                         shape, ranks_per_node or 1, exchange)
    bound = getattr(ALGORITHMS.get(algorithm), "bounded_by", None)
    if bound is None or exchange != "flat":
        return vol
    summa = _predict(bound, layout, P, c, f, itemsize, shape=shape)
    if ranks_per_node is not None:
        shape3 = grid_shape(P, shape, GRID_ALGORITHMS[bound])
        summa = dataclasses.replace(summa, **summa_inter(
            layout.sizes, layout.block_nnz(), shape3, f, itemsize,
            node_of_rank(P, ranks_per_node)))
    return route_grid(vol, summa)


def takes_summa(algorithm: str, layout: Layout, P: int, f: int, itemsize: int,
                codec: str | None = None, codec_backward: str | None = "same",
                shape: tuple[int, ...] | None = None) -> tuple[bool, bool]:
    """(forward, transpose): does ``sparse2d``/``sparse3d`` run SUMMA at width f and this
    itemsize on the flat exchange (``algorithms/grid_route.py``)? (False, False) for the
    other algorithms."""
    bound = getattr(ALGORITHMS.get(algorithm), "bounded_by", None)
    if bound is None:
        return False, False
    sparse = _predict(algorithm, layout, P, 1, f, itemsize, codec, codec_backward, shape)
    summa = _predict(bound, layout, P, 1, f, itemsize, shape=shape)
    return bool(np.any(sparse.sent > summa.sent)), bool(np.any(sparse.sent_t > summa.sent_t))


def route_grid(sparse: Volumes, oblivious: Volumes) -> Volumes:
    """What ``sparse2d``/``sparse3d`` do per direction (``algorithms/grid_route.py``): the
    sparse route unless it sends more than SUMMA on some rank, then SUMMA's bytes (and its
    bytes by tier, which it prices as the network's: no tier phases); ``sparse`` itself when
    both directions stay sparse."""
    fwd = oblivious if np.any(sparse.sent > oblivious.sent) else sparse
    bwd = oblivious if np.any(sparse.sent_t > oblivious.sent_t) else sparse
    if fwd is sparse and bwd is sparse:
        return sparse
    return Volumes(sent=fwd.sent, received=fwd.received, sent_t=bwd.sent_t,
                   received_t=bwd.received_t, allreduce=np.zeros_like(sparse.allreduce),
                   nnz=fwd.nnz, messages=fwd.messages, phases=fwd.phases,
                   sent_inter=fwd.sent_inter, received_inter=fwd.received_inter,
                   sent_t_inter=bwd.sent_t_inter, received_t_inter=bwd.received_t_inter,
                   tier_phases=fwd.tier_phases)


def with_tiers(vol: Volumes, algorithm: str, layout: Layout, P: int, c: int, f: int,
               itemsize: int, codec, codec_backward, shape, ranks_per_node: int,
               exchange: str) -> Volumes:
    """``vol`` with its bytes split by tier for ``exchange`` on nodes of ``ranks_per_node``
    consecutive ranks (``node_volumes``); an algorithm without a halo exchange only takes
    "flat" and is left as it is (its collectives are priced as the network's)."""
    shape3 = grid_shape(P, shape, GRID_ALGORITHMS[algorithm]) if algorithm in GRID_ALGORITHMS \
        else None
    key = ("tiers", algorithm, P, c, shape3, ranks_per_node)
    if key not in layout.cache:   # both exchanges of one point share the (costly) counting
        steps = algorithm_needs(algorithm, layout, P, c, shape3)
        node = node_of_rank(P, ranks_per_node)
        layout.cache[key] = None if steps is None else (
            [(Needs(n.name, *(np.zeros(0, np.int64),) * 3, n.rank_color), reduce)
             for n, reduce in steps],   # the names only: the needs are large
            [exchange_rows(n, node, P) for n, _ in steps])
    steps, rows = layout.cache[key] or (None, None)
    if steps is None:
        if exchange != "flat":
            raise SpmmgnnError(f"{algorithm} has no halo exchange to make node-aware")
        return vol
    raw = f * itemsize
    coded = row_bytes(f, itemsize, codec)
    coded_t = coded if codec_backward == "same" else row_bytes(f, itemsize, codec_backward)
    t = tier_bytes(steps, P, ranks_per_node, exchange, raw, coded, raw, coded_t, rows)
    phases = [Phase(name, messages, nbytes, tier, step, node_bytes)
              for name, tier, step, messages, nbytes, node_bytes in t["phases"]]
    out = dataclasses.replace(vol, sent_inter=t["sent_inter"],
                              received_inter=t["received_inter"],
                              sent_t_inter=t["sent_t_inter"],
                              received_t_inter=t["received_t_inter"], tier_phases=phases)
    if exchange == "node":
        out = dataclasses.replace(out, sent=t["sent"], received=t["received"],
                                  sent_t=t["sent_t"], received_t=t["received_t"],
                                  shared=t["shared"], shared_t=t["shared_t"],
                                  phases=phases, messages=sum(p.latency for p in phases))
    return out


def _predict(algorithm: str, layout: Layout, P: int, c: int, f: int, itemsize: int = 4,
             codec: str | None = None, codec_backward: str | None = "same",
             shape: tuple[int, ...] | None = None) -> Volumes:
    if algorithm not in VOLUMES:
        raise SpmmgnnError(f"no volume model for {algorithm!r}; known: {sorted(VOLUMES)}")
    if algorithm in ONE_D and c != 1:
        raise SpmmgnnError(f"{algorithm} is one-dimensional: c must be 1")
    if codec not in (None, "none") and algorithm not in CODEC_ALGORITHMS:
        raise SpmmgnnError(f"{algorithm} takes no codec")
    if algorithm in GRID_ALGORITHMS:
        return VOLUMES[algorithm](layout, P, c, f, itemsize, codec, codec_backward,
                                  shape=shape)
    if shape is not None:
        raise SpmmgnnError(f"{algorithm} runs on a P/c x c grid: no grid shape")
    return VOLUMES[algorithm](layout, P, c, f, itemsize, codec, codec_backward)
