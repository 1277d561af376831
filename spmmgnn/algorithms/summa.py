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

from ..backend.convert import mpi_float_type
from ..exchange.halo import displacements
from ..grid import ProcessGrid
from ..local import kernels
from ..runtime.buffers import BufferPool
from ..runtime.stats import CommStats
from ..runtime.threads import get_threads
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
    """The SUMMA plan of one rank: its tiles, the stage non-zero counts, the buffers."""

    def __init__(self, grid: ProcessGrid, tiles: SummaTiles, held: dict[int, sp.csr_array],
                 stats: CommStats):
        self.t, self.stats = tiles, stats
        self.pr, self.pc, self.pl = tiles.shape
        self.across_row = grid.comm_along("col")    # (i, ., l): tiles, to blocks / to rows
        self.across_col = grid.comm_along("row")    # (., j, l): dense blocks of H
        self.fiber = grid.comm_along("layer") if self.pl > 1 else None
        # per rank of each communicator: on another node than me (bytes by tier)
        self.far = {name: ~grid.node_map(comm).same
                    for name, comm in (("row", self.across_row), ("col", self.across_col),
                                       ("fiber", self.fiber)) if comm is not None}
        nnz = np.zeros(self.pr, dtype=np.int64)
        for k, m in held.items():
            nnz[k] = m.nnz
        self.across_row.Allreduce(MPI.IN_PLACE, nnz, op=MPI.SUM)
        self.nnz = nnz                               # of every stage's tile
        self.held = {k: (m.indptr.astype(np.int64), m.indices.astype(np.int32),
                         m.data.astype(np.float64)) for k, m in held.items()}
        self.packed: dict[int, np.ndarray] = {}   # my tiles as sent, in one dtype at a time
        self.packed_dtype: np.dtype | None = None
        self.received = np.zeros(0, dtype=np.uint8)  # a tile received: grows, never shrinks
        self.buffers = BufferPool()
        self.max_inner = max(u.size for u in tiles.inner)

    def _stage(self, k: int, width: int, dtype) -> np.ndarray:
        """The scratch block of stage k: one buffer as tall as the tallest stage."""
        return self.buffers.get("stage", (self.max_inner, width), dtype)[:self.t.inner[k].size]

    # ---------------------------------------------------------------- tiles of A
    def _pack(self, k: int, dtype) -> np.ndarray:
        """My tile of stage k as bytes: rows, columns (int32), values (dtype); built once per
        dtype (a call in another dtype, such as the float64 symmetry probe, rebuilds them)."""
        if self.packed_dtype != np.dtype(dtype):
            self.packed, self.packed_dtype = {}, np.dtype(dtype)
        if k not in self.packed:
            indptr, indices, data = self.held[k]
            rows = np.repeat(np.arange(indptr.size - 1, dtype=np.int32), np.diff(indptr))
            self.packed[k] = np.concatenate([rows.view(np.uint8), indices.view(np.uint8),
                                             data.astype(dtype).view(np.uint8)])
        return self.packed[k]

    def _tile(self, k: int, dtype):
        """Stage k's tile (indptr, indices, values) on every rank of my process row: the
        holder's own, broadcast to the others (and counted) on every call."""
        dtype = np.dtype(dtype)
        root = k % self.pc
        nbytes = int(self.nnz[k]) * (INDEX_BYTES + dtype.itemsize)
        mine = self.across_row.Get_rank() == root
        if nbytes == 0:
            return None
        if not mine and self.received.size < nbytes:
            self.received = np.empty(int(self.nnz.max()) * (INDEX_BYTES + dtype.itemsize),
                                     dtype=np.uint8)
        buf = self._pack(k, dtype) if mine else self.received[:nbytes]
        with self.stats.timing("seconds_exchange"):
            self.across_row.Bcast([buf, MPI.BYTE], root=root)
        count_stage(self.stats, self.far["row"], self.across_row.Get_rank(), root, nbytes,
                    into_root=False)
        n = int(self.nnz[k])
        if mine:
            indptr = self.held[k][0]
        else:
            indptr = np.zeros(self.t.rows.size + 1, dtype=np.int64)
            np.cumsum(np.bincount(buf[:4 * n].view(np.int32), minlength=self.t.rows.size),
                      out=indptr[1:])
        return indptr, buf[4 * n:8 * n].view(np.int32), buf[8 * n:].view(dtype)

    # ---------------------------------------------------------------- layouts
    def _convert(self, send: np.ndarray, send_counts, recv: np.ndarray, recv_counts) -> None:
        """One ``Alltoallv`` inside my process row of my layer (element counts), counted
        without my own share, and apart as a conversion (``bytes_sent_by_phase``)."""
        me = self.across_row.Get_rank()
        mpitype = mpi_float_type(send.dtype)
        sc, rc = np.asarray(send_counts, np.int64), np.asarray(recv_counts, np.int64)
        with self.stats.timing("seconds_exchange"):
            self.across_row.Alltoallv([send, (sc, displacements(sc)), mpitype],
                                      [recv, (rc, displacements(rc)), mpitype])
        isz, far = send.itemsize, self.far["row"]
        sent, received = (sc.sum() - sc[me]) * isz, (rc.sum() - rc[me]) * isz
        self.stats.count_exchange(sent, received, 0, sc[far].sum() * isz, rc[far].sum() * isz)
        self.stats.count_convert(sent, received)   # CAGNET keeps H in blocks: none there

    def to_blocks(self, x: np.ndarray, rows: PartSet, bounds: np.ndarray) -> np.ndarray:
        """My rows (all features) -> H[U_il, F_j] (rows of process row i in my layer)."""
        j = self.t.j
        fj = int(bounds[j + 1] - bounds[j])
        n, widths = x.shape[0], np.diff(bounds)
        send = self.buffers.get("send", (x.size,), x.dtype)
        start = 0
        for q in range(self.pc):   # feature block q of my rows, for rank (i, q, l)
            w = int(widths[q])
            send[start:start + n * w].reshape(n, w)[...] = x[:, bounds[q]:bounds[q + 1]]
            start += n * w
        sizes = np.diff(rows.offsets)
        block = self.buffers.get("block", (rows.size, fj), x.dtype)
        self._convert(send, x.shape[0] * np.diff(bounds), block, sizes * fj)
        return block

    def to_rows(self, block: np.ndarray, rows: PartSet, bounds: np.ndarray,
                out: np.ndarray) -> None:
        """H[U_il, F_j] -> my rows, all features (the reverse of ``to_blocks``)."""
        n, widths = out.shape[0], np.diff(bounds)
        recv = self.buffers.get("rows", (n * out.shape[1],), out.dtype)
        self._convert(np.ascontiguousarray(block).ravel(), np.diff(rows.offsets) * block.shape[1],
                      recv, n * widths)
        start = 0
        for q in range(self.pc):
            w = int(widths[q])
            out[:, bounds[q]:bounds[q + 1]] = recv[start:start + n * w].reshape(n, w)
            start += n * w

    # ---------------------------------------------------------------- products
    def matmul(self, x: np.ndarray, out: np.ndarray) -> None:
        """out = my rows of A X (``x``: my rows of X)."""
        bounds = stage_ranges(x.shape[1], self.pc)
        h = self.to_blocks(x, self.t.in_rows, bounds)
        self.to_rows(self.matmul_blocks(h), self.t.out_rows, bounds, out)

    def matmul_blocks(self, h: np.ndarray) -> np.ndarray:
        """(A H)[U_il, F_j] from H[U_il, F_j] (``in_rows`` x my feature block): the SUMMA
        stages alone, no conversion (what training in the block layout calls). Returns a
        pooled buffer, overwritten by the next call."""
        t, stats, fj = self.t, self.stats, h.shape[1]
        z = self.buffers.get("z", (t.rows.size, fj), h.dtype)
        z[...] = 0
        mpitype = mpi_float_type(h.dtype)
        for k in range(self.pr):
            tile = self._tile(k, h.dtype)
            hk = h if k == t.i else self._stage(k, fj, h.dtype)
            with stats.timing("seconds_exchange"):
                self.across_col.Bcast([hk, mpitype], root=k)
            count_stage(stats, self.far["col"], t.i, k, hk.nbytes, into_root=False)
            if tile is not None and fj:
                with stats.timing("seconds_multiply"):
                    indptr, indices, data = tile
                    kernels.csr_matmul_unrolled(indptr, indices, data, hk, z,
                                                kernels.row_chunks(indptr, 4 * get_threads()),
                                                True)
        return self._layers_sum(z)

    def matmul_t(self, y: np.ndarray, out: np.ndarray) -> None:
        """out = my rows of A^T Y (``y``: my rows of Y)."""
        bounds = stage_ranges(y.shape[1], self.pc)
        block = self.to_blocks(y, self.t.out_rows, bounds)
        self.to_rows(self.matmul_t_blocks(block), self.t.in_rows, bounds, out)

    def matmul_t_blocks(self, y: np.ndarray) -> np.ndarray:
        """(A^T Y)[U_il, F_j] from Y[U_il, F_j] (``out_rows`` x my feature block), no
        conversion. Returns a pooled buffer, overwritten by the next call."""
        t, stats, fj = self.t, self.stats, y.shape[1]
        yv = self._layers_gather(y)
        mpitype = mpi_float_type(y.dtype)
        mine = None
        for k in range(self.pr):
            tile = self._tile(k, y.dtype)
            part = self._stage(k, fj, y.dtype)
            part[...] = 0
            if tile is not None and fj:
                with stats.timing("seconds_multiply"):
                    indptr, indices, data = tile
                    n_par = kernels.column_split(fj)
                    kernels.csr_t_matmul(indptr, indices, data, yv, part, True, n_par,
                                         kernels.row_split(n_par))
            with stats.timing("seconds_exchange"):
                if k == t.i:
                    mine = self.buffers.get("result", part.shape, y.dtype)
                    self.across_col.Reduce([part, mpitype], [mine, mpitype], op=MPI.SUM, root=k)
                else:
                    self.across_col.Reduce([part, mpitype], None, op=MPI.SUM, root=k)
            count_stage(stats, self.far["col"], t.i, k, part.nbytes, into_root=True)
        return mine

    # ---------------------------------------------------------------- layers (3D)
    def _layer_counts(self, width: int) -> np.ndarray:
        return np.diff(self.t.layer_offsets) * width

    def _layers_sum(self, z: np.ndarray) -> np.ndarray:
        """Sum the layers' Z[V_i, F_j]; I keep my layer's rows U_il (a reduce-scatter)."""
        if self.fiber is None:
            return z
        counts, l = self._layer_counts(z.shape[1]), self.t.l
        lo, hi = self.t.layer_offsets[l], self.t.layer_offsets[l + 1]
        mine = self.buffers.get("layer", (int(hi - lo), z.shape[1]), z.dtype)
        mpitype = mpi_float_type(z.dtype)
        with self.stats.timing("seconds_exchange"):
            self.fiber.Reduce_scatter([z, mpitype], [mine, mpitype], counts, op=MPI.SUM)
        own, far = int(counts[l]) * z.itemsize, self.far["fiber"]
        self.stats.count_exchange(z.nbytes - own, own * (self.pl - 1), 0,
                                  int(counts[far].sum()) * z.itemsize, own * int(far.sum()))
        return mine

    def _layers_gather(self, block: np.ndarray) -> np.ndarray:
        """Y[U_il, F_j] of every layer -> Y[V_i, F_j] (an all-gather across the fiber)."""
        if self.fiber is None:
            return block
        counts = self._layer_counts(block.shape[1])
        full = self.buffers.get("yv", (self.t.rows.size, block.shape[1]), block.dtype)
        mpitype = mpi_float_type(block.dtype)
        with self.stats.timing("seconds_exchange"):
            self.fiber.Allgatherv([block, mpitype], [full, (counts, displacements(counts)),
                                                     mpitype])
        far = self.far["fiber"]
        self.stats.count_exchange(block.nbytes * (self.pl - 1), full.nbytes - block.nbytes, 0,
                                  block.nbytes * int(far.sum()),
                                  int(counts[far].sum()) * block.itemsize)
        return full

    @property
    def nnz_multiplied(self) -> int:
        """Non-zeros this rank multiplies per call (every stage's tile)."""
        return int(self.nnz.sum())
