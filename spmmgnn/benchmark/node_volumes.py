"""Bytes per tier (inside a node, between nodes) of the sparse exchanges, flat and node-aware,
predicted from the partition and the ranks per node alone (no MPI).

Every sparse exchange is a set of *needs*: (needer rank, row id, owner rank) with the needer
on another rank than the owner, plus the communicator the exchange runs on (``color``: ranks
of one color exchange with each other). From them, exactly as the plans count
(``halo.HaloPlan``, ``node_exchange.NodePlan``):

* flat: the owner sends each need's row to the needer; it is inter-node when their nodes
  differ;
* node-aware: for needs between nodes A != B (in one communicator), each distinct row of
  (A, B) goes once from its carrier in A to its carrier in B (``nodes.carriers``; leg 2,
  inter-node); the owner sends it to A's carrier (leg 1, with the rows its own node needs,
  each (owner, rank, row) once), and B's carrier hands it to every needer (leg 3).
  A rank's copies to itself are not counted. Inside a node the legs run through a
  shared-memory window (``shared``): their rows are read, not sent, so ``tier_bytes`` counts
  them as ``shared`` (``bytes_shared_read``), not in ``sent`` / ``received``.

The reduce moves the same rows backwards. ``needs_1d`` (``sparse1d``/``sparse15d``: block row
i needs the distinct columns of other blocks it has non-zeros in, per replica stage),
``needs_grid`` (``sparse2d``/``sparse3d``: expand, fold, fiber), ``needs_prepost`` and
``bin_needs`` (cd-r's bins) list them; ``exchange_rows`` counts them per tier and leg.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..algorithms.prepost1d import cover_split
from ..exchange.nodes import carriers, node_of_rank
from ..local.hashing import hash_ids
from ..runtime.jit import eager_njit
from ..stages import stage_ranges
from .grid_rows import grid_rows


@dataclass
class Needs:
    """One exchange's needs (arrays of equal length) and its communicators."""

    name: str
    needer: np.ndarray
    ids: np.ndarray
    owner: np.ndarray
    rank_color: np.ndarray   # per rank: its communicator (ranks of one color exchange)


@eager_njit(cache=True, nogil=True)
def _needs_1d(indptr, indices, part):
    """(block row, column) once per pair, for columns of other blocks: the rows of block i
    are contiguous, so a column last claimed by block i is marked i (no sort)."""
    nnz = indices.size
    rows = np.empty(nnz, dtype=np.int64)
    cols = np.empty(nnz, dtype=np.int64)
    seen = np.full(part.size, -1, dtype=np.int64)
    m = 0
    for u in range(indptr.size - 1):
        i = part[u]
        for t in range(indptr[u], indptr[u + 1]):
            v = indices[t]
            if seen[v] != i:
                seen[v] = i
                if part[v] != i:
                    rows[m] = i
                    cols[m] = v
                    m += 1
    return rows[:m], cols[:m]


def needs_1d(layout, P: int, c: int) -> Needs:
    """sparse1d (c = 1) and sparse15d: rank (i, j) needs NnzCols(i, q) from (q, j) for the
    block columns q of replica j's stages; the exchange runs across block rows per replica."""
    i, v = _needs_1d(layout.A.indptr, layout.A.indices, layout.parts())
    q = layout.parts()[v]
    replica_of = np.repeat(np.arange(c), np.diff(stage_ranges(layout.k, c)))
    j = replica_of[q]
    return Needs("exchange", i * c + j, v, q * c + j, np.arange(P) % c)


def needs_grid(layout, shape3: tuple[int, int, int]) -> list[Needs]:
    """sparse2d/sparse3d: *expand* (X row v to the tile, along ``row``: ranks of one (j, l)),
    *fold* (the tile's partial row u to its fiber's rank, along ``col``: one (i, l)) and, with
    layers, the *fiber* step (layer l's partial row u to its owner, along ``layer``)."""
    pr, pc, pl = shape3
    parts = layout.parts()
    P = pr * pc * pl
    _, _, _, out, m = grid_rows(layout.A.indptr, layout.A.indices, parts, pc, pl, P,
                                 record=True)
    rest, l = np.divmod(np.arange(P), pl)
    i, j = np.divmod(rest, pc)
    colors = (j * pl + l, i * pl + l, i * pc + j)   # the communicator of each step
    return [Needs(name, *(out[s, a, :m[s]].copy() for a in range(3)), colors[s])
            for s, name in enumerate(("expand", "fold", "fiber")[:3 if pl > 1 else 2])]


def needs_prepost(layout) -> Needs:
    """prepost1d: receiver p needs, from sender q, the X rows of the columns in the cover of
    their cut (one row of q's send buffer per distinct column, shared by the receivers) and
    the partial sums of its rows in the cover (its own rows of q's buffer). The covers are
    ``prepost1d.cover_split``'s, on the cut non-zeros ordered as the algorithm orders them."""
    A, parts, n = layout.A, layout.parts(), layout.A.shape[0]
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(A.indptr))
    cols = A.indices.astype(np.int64)
    p_of, q_of = parts[rows], parts[cols]
    cut = p_of != q_of
    rows, cols, p_of, q_of = rows[cut], cols[cut], p_of[cut], q_of[cut]
    order = np.lexsort((cols, rows, q_of, p_of))
    rows, cols, p_of, q_of = rows[order], cols[order], p_of[order], q_of[order]
    key = p_of * layout.k + q_of
    bounds = np.flatnonzero(np.r_[True, key[1:] != key[:-1], True])
    post = np.zeros(rows.size, dtype=bool)
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):   # one cover per (p, q) pair
        post[a:b] = cover_split(rows[a:b], cols[a:b])
    needer, ids, owner = [], [], []
    pk, pc_ = p_of[post], cols[post]
    first = _first(pk, pc_)
    needer.append(pk[first])
    ids.append(pc_[first])          # an X row: the same id whoever needs it
    owner.append(q_of[post][first])
    pre = ~post
    r_, p_, q_ = rows[pre], p_of[pre], q_of[pre]
    key = np.unique(np.stack([p_, q_, r_]), axis=1) if r_.size else np.zeros((3, 0), np.int64)
    needer.append(key[0])
    ids.append(n + key[1] * n + key[2])   # a partial sum for one receiver's row: never shared
    owner.append(key[1])
    cat = [np.concatenate(a).astype(np.int64) for a in (needer, ids, owner)]
    return Needs("exchange", cat[0], cat[1], cat[2], np.zeros(layout.k, dtype=np.int64))


def bin_needs(needs: Needs, r: int, seed: int) -> list[Needs]:
    """cd-r (``delayed.ghost_bins``): each needer deals its rows from each owner round robin
    over r bins in the order of a seeded hash of the id; one ``Needs`` per bin."""
    order = np.lexsort((hash_ids(needs.ids, seed), needs.owner, needs.needer))
    group = needs.needer[order] * (needs.owner.max(initial=0) + 1) + needs.owner[order]
    start = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
    rank_in = np.arange(order.size) - np.repeat(start, np.diff(np.r_[start, order.size]))
    bins = np.empty(order.size, dtype=np.int64)
    bins[order] = rank_in % max(r, 1)
    return [Needs(needs.name, needs.needer[bins == b], needs.ids[bins == b],
                  needs.owner[bins == b], needs.rank_color) for b in range(r)]


def _first(*keys: np.ndarray) -> np.ndarray:
    """Indices of the first occurrence of each distinct row of ``keys`` (columns)."""
    if not keys[0].size:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort(keys[::-1])
    new = np.zeros(order.size, dtype=bool)
    new[0] = True
    for k in keys:
        s = k[order]
        new[1:] |= s[1:] != s[:-1]
    return order[new]


@dataclass
class Leg:
    """Rows one rank sends and receives in one step, and its messages (peers)."""

    tier: str
    sent: np.ndarray
    received: np.ndarray
    messages: np.ndarray


def _leg(tier: str, src: np.ndarray, dst: np.ndarray, P: int) -> Leg:
    """Rows from ``src[i]`` to ``dst[i]`` (one each), copies to oneself left out."""
    moves = src != dst
    src, dst = src[moves], dst[moves]
    pairs = _first(src, dst)
    out = np.bincount(src[pairs], minlength=P)
    got = np.bincount(dst[pairs], minlength=P)
    return Leg(tier, np.bincount(src, minlength=P), np.bincount(dst, minlength=P),
               np.maximum(out, got))


def exchange_rows(needs: Needs, node: np.ndarray, P: int) -> dict:
    """Per-rank rows of one exchange: ``flat`` (two ``Leg``: intra, inter, concurrent) and
    ``node`` (three ``Leg``: gather, between nodes, distribute, one after the other)."""
    nd, no = node[needs.needer], node[needs.owner]
    far = nd != no
    flat = [_leg("intra", needs.owner[~far], needs.needer[~far], P),
            _leg("inter", needs.owner[far], needs.needer[far], P)]
    B, ids = nd[far], needs.ids[far]
    s, t = carriers(needs.rank_color, node, needs.owner[far], B)
    color = needs.rank_color[needs.needer[far]]
    uniq = _first(color, B, ids)   # in one communicator a row has one owner: one lane
    leg2 = _leg("inter", s[uniq], t[uniq], P)
    leg3 = _leg("intra", t, needs.needer[far], P)
    # leg 1: direct rows and staged rows, each (owner, rank, row) once
    src = np.concatenate([needs.owner[~far], needs.owner[far][uniq]])
    dst = np.concatenate([needs.needer[~far], s[uniq]])
    rid = np.concatenate([needs.ids[~far], ids[uniq]])
    once = _first(src, dst, rid)
    leg1 = _leg("intra", src[once], dst[once], P)
    return dict(flat=flat, node=[leg1, leg2, leg3])


def tier_volumes(needs_list: list[Needs], P: int, ranks_per_node: int) -> dict:
    """``{"flat": [[Leg, Leg], ...], "node": [[Leg, Leg, Leg], ...]}``: the legs of each
    exchange of ``needs_list`` (in call order) on nodes of ``ranks_per_node`` ranks."""
    node = node_of_rank(P, ranks_per_node)
    rows = [exchange_rows(n, node, P) for n in needs_list]
    return dict(flat=[r["flat"] for r in rows], node=[r["node"] for r in rows], node_of=node)


def algorithm_needs(algorithm: str, layout, P: int, c: int, shape3=None) -> list[tuple]:
    """``[(Needs, reduce)]``: the exchanges of one forward call of a sparse algorithm, in
    order; ``reduce`` when the forward sends the needs backwards (partial rows to owners:
    the fold and fiber steps). None for an algorithm without a halo exchange."""
    if algorithm in ("sparse1d", "sparse15d"):
        return [(needs_1d(layout, P, c), False)]
    if algorithm == "prepost1d":
        return [(needs_prepost(layout), False)]
    if algorithm in ("sparse2d", "sparse3d"):
        return [(n, n.name != "expand") for n in needs_grid(layout, shape3)]
    return None


def tier_bytes(steps: list[tuple], P: int, ranks_per_node: int, exchange: str,
               raw: int, coded: int, raw_t: int, coded_t: int, rows: list | None = None) -> dict:
    """Per-rank bytes of one forward and one transpose call with the ``exchange`` ("flat" or
    "node"): ``sent``, ``received``, ``sent_inter``, ``received_inter`` (and ``*_t``), and
    the forward's ``phases`` as ``(name, tier, step, messages, bytes, node_bytes)``: bytes
    the larger of sent and received, node_bytes (inter-node steps) the larger of what the
    rank's node sends and receives. ``raw``/``coded``: bytes per row without / with the
    codec (the flat exchange codes every row, the node-aware one its inter-node leg);
    ``*_t`` those of the transpose. ``rows``: ``exchange_rows`` of each step, if known.
    The node-aware exchange's intra-node legs are read out of shared memory: ``shared``
    (``shared_t``), the bytes a rank reads from other ranks' windows, not in ``sent``."""
    node = node_of_rank(P, ranks_per_node)
    rows = rows or [exchange_rows(needs, node, P) for needs, _ in steps]
    z = np.zeros(P, dtype=np.int64)
    out = {k: z.copy() for k in ("sent", "received", "sent_inter", "received_inter",
                                  "sent_t", "received_t", "sent_t_inter", "received_t_inter",
                                  "shared", "shared_t")}
    phases, step = [], 0
    for (needs, reduce), both in zip(steps, rows, strict=True):
        legs = both[exchange]
        for t, (rb, rbc, sfx, back) in enumerate(((raw, coded, "", reduce),
                                                  (raw_t, coded_t, "_t", not reduce))):
            for at, leg in enumerate(legs):
                width = rbc if exchange == "flat" or leg.tier == "inter" else rb
                s, r = (leg.received, leg.sent) if back else (leg.sent, leg.received)
                if exchange == "node" and leg.tier == "intra":
                    out[f"shared{sfx}"] += r * width
                else:
                    out[f"sent{sfx}"] += s * width
                    out[f"received{sfx}"] += r * width
                if leg.tier == "inter":
                    out[f"sent{sfx}_inter"] += s * width
                    out[f"received{sfx}_inter"] += r * width
                if t == 0:  # the forward's phases
                    nb = np.maximum(np.bincount(node, s * width)[node],
                                    np.bincount(node, r * width)[node]).astype(np.int64)
                    label = LEG_NAMES[at] if exchange == "node" else leg.tier
                    phases.append((f"{needs.name} {label}", leg.tier,
                                   step + (at if exchange == "node" else 0),
                                   leg.messages, np.maximum(s, r) * width, nb))
        step += 3 if exchange == "node" else 1
    out["phases"] = phases
    return out


LEG_NAMES = ("gather in node", "between nodes", "distribute in node")
