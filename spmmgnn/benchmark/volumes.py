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
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import scipy.sparse as sp

from ..algorithms import ALGORITHMS
from ..algorithms.plexus3d import plexus_blocks, plexus_orders
from ..algorithms.vertex_cover import min_vertex_cover
from ..exchange.nodes import node_of_rank
from ..layout import resolve_partition
from ..local.codecs import get_codec
from ..runtime.errors import SpmmgnnError
from ..runtime.jit import eager_njit
from ..stages import stage_ranges
from .grid_rows import grid_rows
from .node_volumes import Needs, algorithm_needs, exchange_rows, tier_bytes
from .summa_tiers import summa_inter


@eager_njit(cache=True, nogil=True)
def _pair_volume(indptr, indices, part, k):
    """``V[i, q]`` of ``Layout.pair_volume`` in one pass over the CSR: the rows of block i
    are contiguous, so a column seen last by block i is marked with i (no sort)."""
    V = np.zeros((k, k), dtype=np.int64)
    seen = np.full(part.size, -1, dtype=np.int64)
    for u in range(indptr.size - 1):
        i = part[u]
        for t in range(indptr[u], indptr[u + 1]):
            v = indices[t]
            if seen[v] != i:
                seen[v] = i
                q = part[v]
                if q != i:
                    V[i, q] += 1
    return V


@eager_njit(cache=True, nogil=True)
def block_pairs(indptr, indices, row_block, col_block, kr, kc):
    """``N[a, b]``: the non-zeros whose row is in block ``row_block[row]`` = a and whose
    column is in block ``col_block[column]`` = b, in one pass (no per-non-zero arrays)."""
    N = np.zeros((kr, kc), dtype=np.int64)
    for u in range(indptr.size - 1):
        a = row_block[u]
        for t in range(indptr[u], indptr[u + 1]):
            N[a, col_block[indices[t]]] += 1
    return N


class _CoverGraph:
    """The bipartite graph of ``Layout.cover_volume``: left vertices (row, sender block),
    right vertices (column, receiver block), one edge per cut non-zero; CSR by left vertex."""

    def __init__(self, n_edges: int, n_left: int, n_right: int):
        self.indptr = np.zeros(n_left + 1, dtype=np.int64)
        self.right = np.empty(n_edges, dtype=np.int64)
        self.left_row = np.empty(n_left, dtype=np.int64)
        self.left_block = np.empty(n_left, dtype=np.int64)
        self.right_col = np.empty(n_right, dtype=np.int64)
        self.right_block = np.empty(n_right, dtype=np.int64)


def _cover_graph(indptr, indices, part, k, graph):
    """Count (``graph`` None: returns edges, left and right vertices) or fill ``graph``."""
    if graph is None:
        empty = np.empty(0, dtype=np.int64)
        return _cover_pass(indptr, indices, part, k, False, empty, empty, empty, empty, empty,
                           empty)
    return _cover_pass(indptr, indices, part, k, True, graph.indptr, graph.right,
                       graph.left_row, graph.left_block, graph.right_col, graph.right_block)


@eager_njit(cache=True, nogil=True)
def _cover_pass(indptr, indices, part, k, write, g_indptr, g_right, left_row, left_block,
                right_col, right_block):
    """One pass over the CSR (block rows contiguous). A row's left vertices are numbered as
    their sender blocks first appear in it (a stamp per block); a column's right vertex for
    receiver block i is the one it got while block i's rows ran (a stamp per column), so no
    sort and no per-non-zero keys. The edges of a left vertex are placed by a second walk of
    the row (counting sort within the row)."""
    n = indptr.size - 1
    stamp = np.full(k, -1, dtype=np.int64)      # row that last numbered block q's left vertex
    left_id = np.zeros(k, dtype=np.int64)
    col_stamp = np.full(part.size, -1, dtype=np.int64)
    col_id = np.zeros(part.size, dtype=np.int64)
    n_edges = n_left = n_right = 0
    for r in range(n):
        i = part[r]
        first = n_left
        for t in range(indptr[r], indptr[r + 1]):
            c = indices[t]
            q = part[c]
            if q == i:
                continue
            n_edges += 1
            if stamp[q] != r:
                stamp[q] = r
                left_id[q] = n_left
                if write:
                    left_row[n_left] = r
                    left_block[n_left] = q
                    g_indptr[n_left + 1] = 0
                n_left += 1
            if col_stamp[c] != i:
                col_stamp[c] = i
                col_id[c] = n_right
                if write:
                    right_col[n_right] = c
                    right_block[n_right] = i
                n_right += 1
            if write:
                g_indptr[left_id[q] + 1] += 1
        if write and n_left > first:
            for v in range(first, n_left):     # this row's left vertices: offsets, then fill
                g_indptr[v + 1] += g_indptr[v]
            fill = g_indptr[first:n_left].copy()
            for t in range(indptr[r], indptr[r + 1]):
                c = indices[t]
                q = part[c]
                if q != i:
                    v = left_id[q] - first
                    g_right[fill[v]] = col_id[c]
                    fill[v] += 1
    return n_edges, n_left, n_right


@dataclass
class Layout:
    """The matrix the SpMM applies, relabelled so block rows are contiguous, and its blocks."""

    A: sp.csr_array           # n x n, rows/columns in the relabelled order
    offsets: np.ndarray       # k + 1 block-row boundaries
    _pairs: np.ndarray | None = field(default=None, repr=False)
    _parts: np.ndarray | None = field(default=None, repr=False)
    _block_nnz: np.ndarray | None = field(default=None, repr=False)
    cache: dict = field(default_factory=dict, repr=False)   # per-shape passes of the model

    @classmethod
    def build(cls, A, partition=None, k: int = 1) -> Layout:
        """From the user's square matrix (original order) and what ``DistSpMM.from_scipy``
        accepts as ``partition`` (None: k near-equal contiguous blocks, block sizes, a part
        vector or a ``spmmgnn.Partition``), laid out as ``from_scipy`` lays it out."""
        A = sp.csr_array(A)
        if A.shape[0] != A.shape[1]:
            raise SpmmgnnError(f"the volume model needs a square matrix, got {A.shape}")
        partition = resolve_partition(partition, A.shape[0], k)
        if not partition.is_identity:
            A = sp.csr_array(A[partition.perm][:, partition.perm])
        A.sum_duplicates()
        return cls(A, np.asarray(partition.offsets, dtype=np.int64))

    @property
    def k(self) -> int:
        return int(self.offsets.size - 1)

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.offsets)

    def block_of(self, ids: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.offsets, ids, side="right") - 1

    def row_blocks(self) -> np.ndarray:
        """Block row of every stored non-zero."""
        return np.repeat(self.block_of(np.arange(self.A.shape[0])), np.diff(self.A.indptr))

    def pair_volume(self) -> np.ndarray:
        """``V[i, q]``: distinct columns of block q with a non-zero in block row i (i != q;
        the diagonal is 0). Row i needs exactly these rows of X from block q."""
        if self._pairs is None:
            self._pairs = _pair_volume(self.A.indptr, self.A.indices, self.parts(), self.k)
        return self._pairs

    def parts(self) -> np.ndarray:
        """The block of every row (and column): O(n), once."""
        if self._parts is None:
            self._parts = np.repeat(np.arange(self.k, dtype=np.int64), self.sizes)
        return self._parts

    def cover_volume(self) -> np.ndarray:
        """``C[i, q]``: rows block q sends block row i in ``prepost1d``, the size of a minimum
        vertex cover of the cut non-zeros of A_iq (rows of block i x columns of block q).

        The k(k-1) bipartite graphs are disjoint once a row is tagged with the sender block
        and a column with the receiver block, so one matching covers them all at once."""
        k = self.k
        part = self.parts()
        indptr, indices = self.A.indptr.astype(np.int64), self.A.indices
        n_edges, n_left, n_right = _cover_graph(indptr, indices, part, k, None)
        if n_edges == 0:
            return np.zeros((k, k), dtype=np.int64)
        graph = _CoverGraph(n_edges, n_left, n_right)
        _cover_graph(indptr, indices, part, k, graph)
        B = sp.csr_array((np.ones(n_edges, dtype=np.int8), graph.right, graph.indptr),
                         shape=(n_left, n_right))
        row_cover, col_cover = min_vertex_cover(B)
        pairs = np.concatenate([part[graph.left_row[row_cover]] * k
                                + graph.left_block[row_cover],
                                graph.right_block[col_cover] * k
                                + part[graph.right_col[col_cover]]])
        return np.bincount(pairs, minlength=k * k).reshape(k, k).astype(np.int64)

    def block_nnz(self) -> np.ndarray:
        """``N[i, q]``: non-zeros of block A_iq (one pass, kept)."""
        if self._block_nnz is None:
            part = self.parts()
            self._block_nnz = block_pairs(self.A.indptr, self.A.indices, part, part,
                                          self.k, self.k)
        return self._block_nnz


@dataclass
class Phase:
    """One step of a call as the alpha-beta model prices it, per rank: ``latency`` message
    start-ups on the rank's critical path and ``bytes`` it moves (the larger of sent and
    received, or a collective's per-rank share).

    The two-tier model (``costs``) also reads ``tier`` ("intra", "inter", or "any": priced
    as the network), ``node_bytes`` (an inter-node step: the larger of what the rank's node
    sends and receives, for the shared links) and ``step``: phases of one step run at the
    same time (the slower counts), steps one after the other (-1: a step of its own)."""

    name: str
    latency: np.ndarray
    bytes: np.ndarray
    tier: str = "any"
    step: int = -1
    node_bytes: np.ndarray | None = None


@dataclass
class Volumes:
    """Per-rank bytes of one call (forward ``matmul``, transpose ``matmul_t``)."""

    sent: np.ndarray
    received: np.ndarray
    sent_t: np.ndarray
    received_t: np.ndarray
    allreduce: np.ndarray       # per call, same for both directions
    nnz: np.ndarray             # non-zeros each rank multiplies (local work)
    messages: np.ndarray        # peers a rank exchanges with per call (latency terms)
    # the steps of a forward call, one after the other; empty: one exchange of
    # ``messages`` peers and max(sent, received) bytes (the all-to-allv algorithms)
    phases: list[Phase] = field(default_factory=list)
    # bytes that cross between nodes (``node_volumes``; None: not modelled per tier) and the
    # forward's phases by tier, for the two-tier model
    sent_inter: np.ndarray | None = None
    received_inter: np.ndarray | None = None
    sent_t_inter: np.ndarray | None = None
    received_t_inter: np.ndarray | None = None
    # the node-aware exchange: bytes a rank reads from other ranks' shared-memory windows
    shared: np.ndarray | None = None
    shared_t: np.ndarray | None = None
    tier_phases: list[Phase] = field(default_factory=list)

    def as_dict(self) -> dict:
        d = {k: None if v is None else np.asarray(v).tolist() for k, v in self.__dict__.items()
             if k not in ("phases", "tier_phases")}
        for key in ("phases", "tier_phases"):
            d[key] = [dict(name=p.name, latency=np.asarray(p.latency).tolist(),
                           bytes=np.asarray(p.bytes).tolist(), tier=p.tier, step=p.step)
                      for p in getattr(self, key)]
        return d

    def priced_phases(self) -> list[Phase]:
        """What the time model prices: ``phases``, or the one exchange."""
        return self.phases or [Phase("exchange", self.messages,
                                     np.maximum(self.sent, self.received))]


def row_bytes(f: int, itemsize: int, codec: str | None) -> int:
    """Bytes one row of f values takes on the wire (the codec's width, or f x itemsize)."""
    c = get_codec(codec)
    if c is None:
        return f * itemsize
    return int(c.row_bytes(f))


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


def grid_shape(P: int, shape, ndim: int) -> tuple[int, int, int]:
    """(pr, pc, pl) of a 2D (``ndim`` 2, pl = 1) or 3D grid of P ranks; ``shape`` None takes
    the factors of P closest to a square / cube (CAGNET's sqrt(P) x sqrt(P), P^1/3 cube)."""
    from ..grid import format_shape, near_square

    shape = near_square(P, ndim) if shape is None else tuple(int(s) for s in shape)
    if len(shape) != ndim or int(np.prod(shape)) != P:
        raise SpmmgnnError(f"a {ndim}D grid of P={P} ranks, got {format_shape(shape)}")
    return (*shape, 1) if ndim == 2 else tuple(shape)


def _coords(shape3, p: np.ndarray):
    pr, pc, pl = shape3
    rest, l = np.divmod(p, pl)
    i, j = np.divmod(rest, pc)
    return i, j, l


def _expand_fold_rows(layout: Layout, shape3) -> tuple[list[tuple], np.ndarray]:
    """The row exchanges of sparse2d/sparse3d, one ``(sent, received, peers, name)`` each,
    and the non-zeros of every tile: the tile of a non-zero (u, v) is rank (i(u), j(v), l(v))
    in owner coordinates; *expand* sends X row v to the tile unless it owns v; *fold* sends
    the tile's partial row u to (i(u), j(u), l(v)) when that is another rank's fiber; the
    *fiber* step sends row u's partial of layer l(v) to u's owner when l(v) != l(u)."""
    P = layout.k
    _, pc, pl = shape3
    key = ("grid", pc, pl)
    if key not in layout.cache:   # one pass per grid shape (the time and memory models share)
        layout.cache[key] = grid_rows(layout.A.indptr, layout.A.indices, layout.parts(), pc,
                                       pl, P)
    rows, pairs, nnz, _, _ = layout.cache[key]
    out = []
    for s, name in enumerate(("expand", "fold", "fiber")[:3 if pl > 1 else 2]):
        peers = np.maximum(pairs[s].sum(axis=1, dtype=np.int64),
                           pairs[s].sum(axis=0, dtype=np.int64))
        out.append((rows[s, 0], rows[s, 1], peers, name))
    return out, nnz


def grid_metrics(A, partition, shape: tuple[int, ...]) -> dict[str, np.ndarray]:
    """The 2D/3D partition metrics (docs/metrics.md) of ``A`` (the user's order) laid out by
    ``partition`` (anything ``from_scipy`` takes, with P parts) on the grid ``shape``: per
    rank ``expand`` (rows of X received), ``fold`` (partial rows sent), ``fiber`` (3D:
    partial rows sent across layers), ``*_peers`` and the tile's ``nnz``."""
    P = int(np.prod(shape))
    layout = Layout.build(A, partition, P)
    steps, nnz = _expand_fold_rows(layout, grid_shape(P, shape, len(shape)))
    out = {"nnz": nnz}
    for sent, received, peers, name in steps:
        out[name] = received if name == "expand" else sent
        out[f"{name}_peers"] = peers
    return out


def sparse_grid_volumes(layout: Layout, P: int, c: int, f: int, itemsize: int = 4,
                        codec: str | None = None, codec_backward: str | None = "same",
                        shape=None, ndim: int = 2) -> Volumes:
    """sparse2d / sparse3d: expand, fold (and the fiber step): each a halo exchange whose
    forward rows travel with ``codec`` and whose transpose sends them back as partial sums
    (``codec_backward``)."""
    _one_part_per_rank(layout, P, c)
    shape3 = grid_shape(P, shape, ndim)
    steps, nnz = _expand_fold_rows(layout, shape3)
    rb = row_bytes(f, itemsize, codec)
    rbt = rb if codec_backward == "same" else row_bytes(f, itemsize, codec_backward)
    sent = sum(s for s, _, _, _ in steps)
    received = sum(r for _, r, _, _ in steps)
    phases = [Phase(name, peers, np.maximum(s, r) * rb) for s, r, peers, name in steps]
    return Volumes(sent=sent * rb, received=received * rb, sent_t=received * rbt,
                   received_t=sent * rbt, allreduce=np.zeros(P, dtype=np.int64), nnz=nnz,
                   messages=sum(p.latency for p in phases), phases=phases)


def summa_volumes(layout: Layout, P: int, c: int, f: int, itemsize: int = 4,
                  codec: str | None = None, codec_backward: str | None = "same",
                  shape=None, ndim: int = 2, convert: bool = True) -> Volumes:
    """oblivious2d / oblivious3d (``algorithms/summa.py``): the rows converted to and from
    2D blocks inside the process row, pr stages each broadcasting the stage's tile of A (3
    words per non-zero) along the process row and a block of H along the process column,
    and in 3D the layers' reduce-scatter (the transpose: an all-gather first and a reduce
    per stage). ``convert=False``: the stages alone, H kept in the blocks between calls
    (``train --grid-layout``, as CAGNET trains)."""
    if codec not in (None, "none"):
        raise SpmmgnnError("the oblivious algorithms broadcast whole blocks: no codec")
    _one_part_per_rank(layout, P, c)
    shape3 = grid_shape(P, shape, ndim)
    pr, pc, pl = shape3
    i, j, l = _coords(shape3, np.arange(P))
    n_r = layout.sizes.astype(np.int64)
    fj = np.diff(stage_ranges(f, pc))[j]
    U = n_r.reshape(pr, pc, pl).sum(axis=1)                 # U[i, l]: rows of parts (i, ., l)
    Usz, Vsz = U[i, l], U.sum(axis=1)[i]
    N = layout.block_nnz()                                  # N[p, q]
    pi, _, pll = _coords(shape3, np.arange(P))
    # nnz of the tile A[V_i, U_kl] = rows of process row i, columns of parts (k, ., l)
    tiles = np.zeros((pr, pr, pl), dtype=np.int64)
    np.add.at(tiles, (pi[:, None], pi[None, :], pll[None, :]), N)
    tile_bytes = tiles * (8 + itemsize)                     # [i, k, l]
    k = np.arange(pr)
    held = (k[None, :] % pc) == j[:, None]                  # [rank, k]: I hold tile k
    mine_a = tile_bytes[i, :, l]                            # [rank, k]
    a_sent = (held * mine_a).sum(axis=1) * (pc - 1)
    a_recv = (~held * mine_a).sum(axis=1)
    h_blocks = U[:, l].T * fj[:, None] * itemsize            # [rank, k]: |U_kl| |F_j|
    h_own = Usz * fj * itemsize
    h_sent, h_recv = (pr - 1) * h_own, h_blocks.sum(axis=1) - h_own
    conv_a = n_r * (f - fj) * itemsize * convert             # my rows' other features
    conv_b = (Usz - n_r) * fj * itemsize * convert           # the block's other rows
    layer_a = (Vsz - Usz) * fj * itemsize                    # reduce-scatter: others' rows
    layer_b = Usz * fj * itemsize * (pl - 1)                 # my rows from each other layer
    sent = conv_a + a_sent + h_sent + layer_a + conv_b
    received = conv_b + a_recv + h_recv + layer_b + conv_a
    sent_t = conv_a + layer_b + a_sent + h_recv + conv_b
    received_t = conv_b + layer_a + a_recv + h_sent + conv_a
    tree_r, tree_c = log2_ceil(pr), log2_ceil(pc)
    const = np.ones(P, dtype=np.int64)
    phases = [Phase("to blocks", const * (pc - 1), np.maximum(conv_a, conv_b)),
              Phase("tiles of A", const * pr * tree_c, mine_a.sum(axis=1) * (pc > 1)),
              Phase("blocks of H", const * pr * tree_r, h_blocks.sum(axis=1) * (pr > 1))]
    if pl > 1:
        phases.append(Phase("layers", const * log2_ceil(pl), layer_a))
    phases.append(Phase("to rows", const * (pc - 1), np.maximum(conv_a, conv_b)))
    if not convert:
        phases = phases[1:-1]
    return Volumes(sent=sent, received=received, sent_t=sent_t, received_t=received_t,
                   allreduce=np.zeros(P, dtype=np.int64),
                   # every stage's tile times the rank's f_j of the f columns (as
                   # featureparallel's work): nnz x f / P on an even split
                   nnz=np.rint(tiles[i, :, l].sum(axis=1) * fj / max(f, 1)).astype(np.int64),
                   messages=sum(p.latency for p in phases), phases=phases)


def plexus_volumes(layout: Layout, P: int, c: int, f: int, itemsize: int = 4,
                   codec: str | None = None, codec_backward: str | None = "same",
                   shape=None, convert: bool = True) -> Volumes:
    """plexus3d (``algorithms/plexus3d.py``): the rows converted to the permuted blocks, the
    all-gather of X[C_x, F_y] along z, the reduce-scatter of A[R_z, .] X along x, the
    conversion back (the transpose: the same with x and z swapped), at the default
    ``permute_seed`` 0. ``convert=False``: the all-gather and reduce-scatter alone in the
    layout ``V`` that ``train --plexus-blocks`` keeps from layer to layer (as Plexus runs;
    ``nn/plexus_model.py``): rank (x, y, z) holds row block z X + x of both sides, so its
    column group along z is the blocks z' X + x (its tile ``T0``; the non-zeros counted are
    plexus3d's own tile's)."""
    if codec not in (None, "none"):
        raise SpmmgnnError("plexus3d gathers and reduces whole blocks: no codec")
    _one_part_per_rank(layout, P, c)
    X, Y, Z = grid_shape(P, shape, 3)
    n = int(layout.offsets[-1])
    row_pos, col_pos = plexus_orders(n, n)
    row_bounds, col_bounds, _ = plexus_blocks((X, Y, Z), n, n)
    x, y, z = _coords((X, Y, Z), np.arange(P))
    w = np.diff(stage_ranges(f, Y))[y] * itemsize            # bytes of one row's F_y
    cnt_r = plexus_counts(layout, row_pos, row_bounds)
    cnt_c = plexus_counts(layout, col_pos, col_bounds)
    br, bc = z * X + x, x * Z + z                              # my row block, column block
    size_r, size_c = np.diff(row_bounds), np.diff(col_bounds)
    r_z, c_x = size_r.reshape(Z, X).sum(axis=1)[z], size_c.reshape(X, Z).sum(axis=1)[x]
    in_c, in_r = (plexus_conversion(layout, cnt, b, size, w, f * itemsize)
                  for cnt, b, size in ((cnt_c, bc, size_c), (cnt_r, br, size_r)))
    rank = np.arange(P)
    peers_c = (cnt_c > 0).sum(axis=1) * Y - (cnt_c[rank, bc] > 0)
    peers_r = (cnt_r > 0).sum(axis=1) * Y - (cnt_r[rank, br] > 0)
    if not convert:   # layout V: the column blocks are the row blocks z' X + x
        in_c = in_r = (np.zeros(P, dtype=np.int64),) * 2
        size_c, bc, c_x = size_r, br, size_r.reshape(Z, X).sum(axis=0)[x]
    gather_z = (size_c[bc] * w * (Z - 1), (c_x - size_c[bc]) * w)
    gather_x = (size_r[br] * w * (X - 1), (r_z - size_r[br]) * w)
    reduce_x, reduce_z = gather_x[::-1], gather_z[::-1]       # the reverse of a gather
    sent = in_c[0] + gather_z[0] + reduce_x[0] + in_r[1]
    received = in_c[1] + gather_z[1] + reduce_x[1] + in_r[0]
    sent_t = in_r[0] + gather_x[0] + reduce_z[0] + in_c[1]
    received_t = in_r[1] + gather_x[1] + reduce_z[1] + in_c[0]
    nnz = plexus_tile_nnz(layout, (X, Y, Z))
    phases = [Phase("to blocks", peers_c * convert, np.maximum(*in_c)),
              Phase("all-gather along z", np.full(P, log2_ceil(Z)), np.maximum(*gather_z)),
              Phase("reduce-scatter along x", np.full(P, log2_ceil(X)),
                    np.maximum(*reduce_x)),
              Phase("to rows", peers_r * convert, np.maximum(*in_r))]
    return Volumes(sent=sent, received=received, sent_t=sent_t, received_t=received_t,
                   allreduce=np.zeros(P, dtype=np.int64),
                   nnz=np.rint(nnz * np.diff(stage_ranges(f, Y))[y] / max(f, 1)
                               ).astype(np.int64),
                   messages=sum(p.latency for p in phases), phases=phases)


def plexus_counts(layout: Layout, pos: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """``cnt[p, b]``: the rows of part p (rank p's rows) in block b of the permuted order
    ``pos`` cut at ``bounds``."""
    nb = bounds.size - 1
    return np.bincount(layout.parts() * nb + np.searchsorted(bounds, pos, "right") - 1,
                       minlength=layout.k * nb).reshape(layout.k, nb)


def plexus_conversion(layout: Layout, cnt: np.ndarray, block: np.ndarray, size: np.ndarray,
                      w: np.ndarray, row: int) -> tuple[np.ndarray, np.ndarray]:
    """Per rank, the bytes (sent, received) converting its rows (``row`` bytes each, all
    features) to its block ``block`` (``size`` rows, ``w`` bytes each: its feature block):
    ``BlockConversion.to_blocks``; ``to_rows`` moves the same the other way."""
    own = cnt[np.arange(cnt.shape[0]), block]
    return layout.sizes * row - own * w, (size[block] - own) * w


def plexus_tile_nnz(layout: Layout, shape3: tuple[int, int, int]) -> np.ndarray:
    """Per rank (x, y, z): the non-zeros of its plexus3d tile A[R_z, C_x] (default seed)."""
    X, Y, Z = shape3
    n = int(layout.offsets[-1])
    row_pos, col_pos = plexus_orders(n, n)
    row_bounds, col_bounds, _ = plexus_blocks(shape3, n, n)
    A = layout.A
    tile_r = (np.searchsorted(row_bounds, row_pos, "right") - 1) // X
    tile_c = (np.searchsorted(col_bounds, col_pos, "right") - 1) // Z
    nnz = block_pairs(A.indptr, A.indices, tile_r, tile_c, Z, X)
    x, _, z = _coords(shape3, np.arange(X * Y * Z))
    return nnz[z, x]


def _one_part_per_rank(layout: Layout, P: int, c: int) -> None:
    if c != 1:
        raise SpmmgnnError("the 2D and 3D algorithms take a grid shape, not a replication c")
    if layout.k != P:
        raise SpmmgnnError(f"the partition has {layout.k} blocks; P = {P} expected (one part "
                           "per rank on a 2D/3D grid)")


def log2_ceil(n: int) -> int:
    """Rounds of a binomial tree over n ranks."""
    return int(np.ceil(np.log2(n))) if n > 1 else 0


def _allreduce(layout: Layout, i: np.ndarray, c: int, f: int, itemsize: int) -> np.ndarray:
    if c == 1:
        return np.zeros(i.size, dtype=np.int64)
    return layout.sizes[i] * f * itemsize


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
