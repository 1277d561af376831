"""The counting side of the byte models: a partition relabelled into its blocks (``Layout``),
the pairs of blocks a non-zero joins, the minimum vertex cover of each pair (``prepost1d``),
and the per-rank result (``Volumes``, ``Phase``)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from ..algorithms.vertex_cover import min_vertex_cover
from ..layout import resolve_partition
from ..local.codecs import get_codec
from ..runtime.errors import SpmmgnnError
from ..runtime.jit import eager_njit


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


def log2_ceil(n: int) -> int:
    """Rounds of a binomial tree over n ranks."""
    return int(np.ceil(np.log2(n))) if n > 1 else 0


def _allreduce(layout: Layout, i: np.ndarray, c: int, f: int, itemsize: int) -> np.ndarray:
    if c == 1:
        return np.zeros(i.size, dtype=np.int64)
    return layout.sizes[i] * f * itemsize
