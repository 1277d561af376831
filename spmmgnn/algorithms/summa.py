"""CAGNET's sparsity-oblivious SUMMA (SC'20 "2D" and Split-3D-SpMM), shared by
``oblivious2d`` (one layer) and ``oblivious3d``.

CAGNET keeps the dense matrices 2D: rank (i, j) holds H[rows of process row i, feature block
j]. Here the dense rows keep the library's 1D layout (rank (i, j, l) owns part (i pc + j) pl + l
with all its features), so each call converts on the way in and out:

* *to blocks*: inside my process row of my layer (the ``col`` dimension, an ``Alltoallv``) I
  send feature block F_j' of my rows to rank (i, j', l) and get H[U_il, F_j], U_il the parts
  (i, ., l);
* *stages* k = 0 .. pr - 1 (as CAGNET's loop): the tile A[V_i, U_kl] is broadcast along my
  process row from rank (i, k mod pc, l) -- as COO, 3 words per non-zero, as CAGNET sends it --
  and H[U_kl, F_j] along my process column from (k, j, l); Z[V_i, F_j] += A H. V_i are all the
  rows of process row i;
* *3D*: the pl layers split the inner dimension; their partial Z are summed by a
  reduce-scatter across the fiber (i, j, .), each layer keeping its rows U_il: a rank sends
  (pl - 1)/pl of its block (CAGNET all-reduces the whole Z and keeps a share, 2 (pl - 1)/pl
  of the block in a bandwidth-optimal all-reduce: twice as much at every pl);
* *to rows*: the reverse ``Alltoallv``.

``A^T Y`` (CAGNET multiplies the stored transpose): the same tile broadcasts, the transposed
tile product, and a reduce of each stage's block onto its owner along the process column
(3D: the layers first all-gather Y[V_i, F_j]).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from ..grid import ProcessGrid
from ..runtime.stats import CommStats
from ..stages import stage_ranges
from .block_broadcast import count_stage
from .tiles import PartSet, SummaTiles, part_of

INDEX_BYTES = 8   # a non-zero travels as (row int32, column int32, value)


def summa_sent(shape: tuple[int, int, int], coords: tuple[int, int, int],
               row_sizes: np.ndarray, col_sizes: np.ndarray, stage_nnz: np.ndarray, f: int,
               itemsize: int) -> tuple[int, int]:
    """Bytes rank ``coords`` sends in one ``matmul`` and one ``matmul_t`` of ``Summa``, as
    ``comm_stats()`` counts them, from the part sizes (rows of A X and of X, per part) and
    the non-zeros of its process row's stage tiles (``stage_nnz[k]``) alone: what
    ``sparse2d``/``sparse3d`` compare their own bytes with (``GridRoute``)."""
    pr, pc, pl = shape
    i, j, l = coords
    fj = int(np.diff(stage_ranges(f, pc))[j])
    me = part_of(shape, i, j, l)
    row_i = part_of(shape, i, np.arange(pc), l)                   # parts (i, ., l)
    u_out, u_in = int(row_sizes[row_i].sum()), int(col_sizes[row_i].sum())
    v = int(row_sizes[part_of(shape, i, np.arange(pc)[:, None], np.arange(pl))].sum())
    u_in_k = np.array([col_sizes[part_of(shape, k, np.arange(pc), l)].sum()
                       for k in range(pr)], dtype=np.int64)      # inner rows of stage k
    held = np.arange(pr) % pc == j
    tiles = int(stage_nnz[held].sum()) * (INDEX_BYTES + itemsize) * (pc - 1)
    n_out, n_in = int(row_sizes[me]), int(col_sizes[me])
    layers = pl > 1
    fwd = (n_in * (f - fj) + (pr - 1) * u_in * fj + layers * (v - u_out) * fj
           + (u_out - n_out) * fj) * itemsize + tiles
    bwd = (n_out * (f - fj) + layers * u_out * fj * (pl - 1)
           + (int(u_in_k.sum()) - int(u_in_k[i])) * fj + (u_in - n_in) * fj) * itemsize + tiles
    return int(fwd), int(bwd)


class Summa:
    """The SUMMA plan of one rank: its tiles, the stage non-zero counts, the buffers. The
    dense blocks are the grid's backend arrays and move by its links; the plan itself (tile
    counts, index lists) is numpy, built over MPI."""

    def __init__(self, grid: ProcessGrid, tiles: SummaTiles, held: dict[int, sp.csr_array],
                 stats: CommStats):
        self.t, self.stats = tiles, stats
        self.pr, self.pc, self.pl = tiles.shape
        self.backend = grid.backend
        self.across_row = grid.comm_along("col")    # (i, ., l): tiles, to blocks / to rows
        self.across_col = grid.comm_along("row")    # (., j, l): dense blocks of H
        self.fiber = grid.comm_along("layer") if self.pl > 1 else None
        comms = (("row", self.across_row), ("col", self.across_col), ("fiber", self.fiber))
        # per rank of each communicator: on another node than me (bytes by tier)
        self.far = {name: ~grid.node_map(comm).same for name, comm in comms
                    if comm is not None}
        self.link = {name: grid.link(comm) for name, comm in comms if comm is not None}
        nnz = np.zeros(self.pr, dtype=np.int64)
        for k, m in held.items():
            nnz[k] = m.nnz
        self.across_row.Allreduce(MPI.IN_PLACE, nnz, op=MPI.SUM)
        self.nnz = nnz                               # of every stage's tile
        self.held = {k: (m.indptr.astype(np.int64), m.indices.astype(np.int32),
                         m.data.astype(np.float64)) for k, m in held.items()}
        # my tiles as sent (bytes) and as multiplied, in one dtype at a time
        self.packed: dict[int, tuple] = {}
        self.packed_dtype: np.dtype | None = None
        self.received = self.backend.empty((0,), np.uint8)  # a tile received: grows
        self.buffers = self.backend.pool()
        self.max_inner = max(u.size for u in tiles.inner)

    def _stage(self, k: int, width: int, dtype):
        """The scratch block of stage k: one buffer as tall as the tallest stage."""
        return self.buffers.get("stage", (self.max_inner, width), dtype)[:self.t.inner[k].size]

    # ---------------------------------------------------------------- tiles of A
    def _pack(self, k: int, dtype) -> tuple:
        """My tile of stage k as bytes (rows, columns: int32; values: dtype) on the backend,
        and as the tile those bytes multiply; built once per dtype (a call in another dtype,
        such as the float64 symmetry probe, rebuilds them)."""
        if self.packed_dtype != np.dtype(dtype):
            self.packed, self.packed_dtype = {}, np.dtype(dtype)
        if k not in self.packed:
            be = self.backend
            indptr, indices, data = self.held[k]
            rows = np.repeat(np.arange(indptr.size - 1, dtype=np.int32), np.diff(indptr))
            buf = be.from_host(np.concatenate([rows.view(np.uint8), indices.view(np.uint8),
                                               data.astype(dtype).view(np.uint8)]))
            n = indices.size
            tile = be.tile(be.from_host(indptr), be.view_bytes(buf[4 * n:8 * n], np.int32),
                           be.view_bytes(buf[8 * n:], dtype), self._tile_shape(k))
            self.packed[k] = (buf, tile)
        return self.packed[k]

    def _tile_shape(self, k: int) -> tuple[int, int]:
        return self.t.rows.size, self.t.inner[k].size

    def _tile(self, k: int, dtype):
        """Stage k's tile on every rank of my process row (a backend ``tile``): the holder's
        own, broadcast to the others (and counted) on every call; None when it is empty."""
        be, dtype = self.backend, np.dtype(dtype)
        root = k % self.pc
        n = int(self.nnz[k])
        nbytes = n * (INDEX_BYTES + dtype.itemsize)
        link = self.link["row"]
        mine = link.rank == root
        if nbytes == 0:
            return None
        if not mine and self.received.shape[0] < nbytes:
            self.received = be.empty((int(self.nnz.max()) * (INDEX_BYTES + dtype.itemsize),),
                                     np.uint8)
        buf = self._pack(k, dtype)[0] if mine else self.received[:nbytes]
        with self.stats.timing("seconds_exchange"):
            link.bcast(buf, root, self.stats, "tile")
        count_stage(self.stats, self.far["row"], link.rank, root, nbytes, into_root=False)
        if mine:
            return self._pack(k, dtype)[1]
        indptr = be.row_pointers(be.view_bytes(buf[:4 * n], np.int32), self.t.rows.size)
        return be.tile(indptr, be.view_bytes(buf[4 * n:8 * n], np.int32),
                       be.view_bytes(buf[8 * n:], dtype), self._tile_shape(k))

    # ---------------------------------------------------------------- layouts
    def _convert(self, send, send_counts, recv, recv_counts) -> None:
        """One all-to-all inside my process row of my layer (flat arrays, element counts),
        counted without my own share, and apart as a conversion (``bytes_sent_by_phase``)."""
        link = self.link["row"]
        me = link.rank
        sc, rc = np.asarray(send_counts, np.int64), np.asarray(recv_counts, np.int64)
        with self.stats.timing("seconds_exchange"):
            link.alltoallv(send, sc, recv, rc, self.stats, "convert")
        isz, far = self.backend.dtype(send).itemsize, self.far["row"]
        sent, received = (sc.sum() - sc[me]) * isz, (rc.sum() - rc[me]) * isz
        self.stats.count_exchange(sent, received, 0, sc[far].sum() * isz, rc[far].sum() * isz)
        self.stats.count_convert(sent, received)   # CAGNET keeps H in blocks: none there

    def to_blocks(self, x, rows: PartSet, bounds: np.ndarray):
        """My rows (all features) -> H[U_il, F_j] (rows of process row i in my layer)."""
        j, dtype = self.t.j, self.backend.dtype(x)
        fj = int(bounds[j + 1] - bounds[j])
        n, widths = x.shape[0], np.diff(bounds)
        send = self.buffers.get("send", (n * x.shape[1],), dtype)
        start = 0
        for q in range(self.pc):   # feature block q of my rows, for rank (i, q, l)
            w = int(widths[q])
            send[start:start + n * w].reshape(n, w)[...] = x[:, bounds[q]:bounds[q + 1]]
            start += n * w
        sizes = np.diff(rows.offsets)
        block = self.buffers.get("block", (rows.size, fj), dtype)
        self._convert(send, n * np.diff(bounds), block.reshape(-1), sizes * fj)
        return block

    def to_rows(self, block, rows: PartSet, bounds: np.ndarray, out) -> None:
        """H[U_il, F_j] -> my rows, all features (the reverse of ``to_blocks``)."""
        be = self.backend
        n, widths = out.shape[0], np.diff(bounds)
        recv = self.buffers.get("rows", (n * out.shape[1],), be.dtype(out))
        self._convert(be.contiguous(block).reshape(-1), np.diff(rows.offsets) * block.shape[1],
                      recv, n * widths)
        start = 0
        for q in range(self.pc):
            w = int(widths[q])
            out[:, bounds[q]:bounds[q + 1]] = recv[start:start + n * w].reshape(n, w)
            start += n * w

    # ---------------------------------------------------------------- products
    def matmul(self, x, out) -> None:
        """out = my rows of A X (``x``: my rows of X)."""
        bounds = stage_ranges(x.shape[1], self.pc)
        h = self.to_blocks(x, self.t.in_rows, bounds)
        self.to_rows(self.matmul_blocks(h), self.t.out_rows, bounds, out)

    def matmul_blocks(self, h):
        """(A H)[U_il, F_j] from H[U_il, F_j] (``in_rows`` x my feature block): the SUMMA
        stages alone, no conversion (what training in the block layout calls). Returns a
        pooled buffer, overwritten by the next call."""
        t, stats, fj, be = self.t, self.stats, h.shape[1], self.backend
        dtype, link = be.dtype(h), self.link["col"]
        z = self.buffers.get("z", (t.rows.size, fj), dtype)
        z[...] = 0
        for k in range(self.pr):
            tile = self._tile(k, dtype)
            hk = h if k == t.i else self._stage(k, fj, dtype)
            with stats.timing("seconds_exchange"):
                link.bcast(hk, k, stats, "stage")
            count_stage(stats, self.far["col"], t.i, k, be.nbytes(hk), into_root=False)
            if tile is not None and fj:
                with stats.timing("seconds_multiply"):
                    tile.matmul(hk, z, accumulate=True)
        return self._layers_sum(z)

    def matmul_t(self, y, out) -> None:
        """out = my rows of A^T Y (``y``: my rows of Y)."""
        bounds = stage_ranges(y.shape[1], self.pc)
        block = self.to_blocks(y, self.t.out_rows, bounds)
        self.to_rows(self.matmul_t_blocks(block), self.t.in_rows, bounds, out)

    def matmul_t_blocks(self, y):
        """(A^T Y)[U_il, F_j] from Y[U_il, F_j] (``out_rows`` x my feature block), no
        conversion. Returns a pooled buffer, overwritten by the next call. Stage k's
        partial block is reduced onto its owner (k, j, l), in place there: the owner makes
        its own stage's partial in the result buffer."""
        t, stats, fj, be = self.t, self.stats, y.shape[1], self.backend
        dtype, link = be.dtype(y), self.link["col"]
        yv = self._layers_gather(y)
        mine = self.buffers.get("result", (t.inner[t.i].size, fj), dtype)
        for k in range(self.pr):
            tile = self._tile(k, dtype)
            part = mine if k == t.i else self._stage(k, fj, dtype)
            part[...] = 0
            if tile is not None and fj:
                with stats.timing("seconds_multiply"):
                    tile.t_matmul(yv, part, accumulate=True)
            with stats.timing("seconds_exchange"):
                link.reduce(part, k, stats, "stage")
            count_stage(stats, self.far["col"], t.i, k, be.nbytes(part), into_root=True)
        return mine

    # ---------------------------------------------------------------- layers (3D)
    def _layer_counts(self, width: int) -> np.ndarray:
        return np.diff(self.t.layer_offsets) * width

    def _layers_sum(self, z):
        """Sum the layers' Z[V_i, F_j]; I keep my layer's rows U_il (a reduce-scatter;
        ``z`` is overwritten)."""
        if self.fiber is None:
            return z
        be = self.backend
        counts, l, isz = self._layer_counts(z.shape[1]), self.t.l, be.dtype(z).itemsize
        lo, hi = self.t.layer_offsets[l], self.t.layer_offsets[l + 1]
        mine = self.buffers.get("layer", (int(hi - lo), z.shape[1]), be.dtype(z))
        with self.stats.timing("seconds_exchange"):
            self.link["fiber"].reduce_scatter(z, mine, counts, self.stats, "layers")
        own, far = int(counts[l]) * isz, self.far["fiber"]
        self.stats.count_exchange(be.nbytes(z) - own, own * (self.pl - 1), 0,
                                  int(counts[far].sum()) * isz, own * int(far.sum()))
        return mine

    def _layers_gather(self, block):
        """Y[U_il, F_j] of every layer -> Y[V_i, F_j] (an all-gather across the fiber)."""
        if self.fiber is None:
            return block
        be = self.backend
        counts = self._layer_counts(block.shape[1])
        full = self.buffers.get("yv", (self.t.rows.size, block.shape[1]), be.dtype(block))
        with self.stats.timing("seconds_exchange"):
            self.link["fiber"].allgatherv(block, full, counts, self.stats, "layers")
        far, nbytes = self.far["fiber"], be.nbytes(block)
        self.stats.count_exchange(nbytes * (self.pl - 1), be.nbytes(full) - nbytes, 0,
                                  nbytes * int(far.sum()),
                                  int(counts[far].sum()) * be.dtype(block).itemsize)
        return full

    @property
    def nnz_multiplied(self) -> int:
        """Non-zeros this rank multiplies per call (every stage's tile)."""
        return int(self.nnz.sum())
