"""Plexus's 3D SpMM (Ranjan, Singh, Wei, Bhatele, SC'25) on an X x Y x Z grid: no
partitioner, a random permutation of the rows and of the columns balances the non-zeros.

Our reading (see docs/algorithms/plexus3d.md): the rows of A (and of A X) and its columns
(the rows of X) are renumbered by two independent seeded random permutations
(``plexus_orders``). The m permuted rows are cut into X Z near-equal blocks R_zx (block
z X + x), the n permuted columns into X Z blocks C_xz (block x Z + z), the f features into Y
blocks F_y. Rank (x, y, z):

* holds the tile A[R_z, C_x] (R_z = R_z0..R_z(X-1), C_x = C_x0..C_x(Z-1)); the Y ranks of a
  feature line hold the same tile (Plexus keeps A once per feature block: the dense volume
  falls as G^(2/3) only so);
* owns X[C_xz, F_y] (input layout) and (A X)[R_zx, F_y] (output layout).

``A X``: all-gather X[C_x, F_y] along z, multiply, reduce-scatter the partial A[R_z, .] X
along x. ``A^T Y``: all-gather Y[R_z, F_y] along x, multiply by the transposed tile,
reduce-scatter along z. The library's row layout is converted to and from these blocks on
every call (one ``Alltoallv`` each way, counted with ``count_convert``).
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from ..backend.host import HOST
from ..exchange.halo import displacements
from ..grid import ProcessGrid
from ..runtime.errors import collective_error
from ..runtime.stats import CommStats
from ..stages import stage_ranges
from .base import DistSpMM
from .tiles import coo_of, local_csr, redistribute


def plexus_orders(m: int, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(row_pos, col_pos): the permuted position of each (laid-out) row and column of A,
    two independent permutations drawn from ``seed`` (the same on every rank)."""
    return (np.random.default_rng([seed, 0]).permutation(m),
            np.random.default_rng([seed, 1]).permutation(n))


def plexus_blocks(shape: tuple[int, int, int], m: int, n: int
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Row block bounds (X Z blocks, block z X + x), column block bounds (block x Z + z) and
    ``rank_of[b, y]`` for both: the rank (x, y, z) owning block b's feature block y."""
    X, Y, Z = shape
    x, z = np.divmod(np.arange(X * Z), Z)            # column block x Z + z
    col_rank = (x[:, None] * Y + np.arange(Y)) * Z + z[:, None]
    z2, x2 = np.divmod(np.arange(X * Z), X)          # row block z X + x
    row_rank = (x2[:, None] * Y + np.arange(Y)) * Z + z2[:, None]
    return stage_ranges(m, X * Z), stage_ranges(n, X * Z), np.stack([row_rank, col_rank])


class BlockConversion:
    """Between the library's row layout (rank r owns rows lo..hi, all features) and a
    block layout (rank ``rank_of[b, y]`` owns positions bounds[b]..bounds[b+1], features
    F_y) of the rows renumbered by ``pos``: one all-to-all each way, through ``link`` (of
    the grid's ``comm``), on ``backend``'s arrays."""

    def __init__(self, comm: MPI.Comm, offsets: np.ndarray, pos: np.ndarray,
                 bounds: np.ndarray, rank_of: np.ndarray, block: int, y: int,
                 stats: CommStats, far: np.ndarray, backend=HOST, link=None):
        from ..exchange.transport import mpi_link

        me, size = comm.Get_rank(), comm.Get_size()
        self.comm, self.rank_of, self.y, self.stats, self.far = comm, rank_of, y, stats, far
        self.backend = backend
        self.link = mpi_link(comm, backend) if link is None else link
        lo, hi = int(offsets[me]), int(offsets[me + 1])
        nb = bounds.size - 1
        b_row = np.searchsorted(bounds, pos[lo:hi], side="right") - 1
        order = np.argsort(b_row, kind="stable")
        self.counts = np.bincount(b_row, minlength=nb).astype(np.int64)
        k = np.empty(hi - lo, dtype=np.int64)
        k[order] = np.arange(hi - lo) - displacements(self.counts)[b_row[order]]
        self.b_row, self.k_row = b_row, k
        blo, bhi = int(bounds[block]), int(bounds[block + 1])
        verts = np.empty(pos.size, dtype=np.int64)
        verts[pos] = np.arange(pos.size)
        verts = verts[blo:bhi]                        # the rows of my block, by position
        self.recv_perm = np.argsort(verts, kind="stable")   # as the owners send them
        owner = np.searchsorted(offsets, verts[self.recv_perm], side="right") - 1
        self.from_rank = np.bincount(owner, minlength=size).astype(np.int64)
        self.n_block = bhi - blo
        self._sides: dict[int, tuple] = {}

    def _count(self, sc: np.ndarray, rc: np.ndarray, itemsize: int) -> None:
        me = self.comm.Get_rank()
        sent, received = (sc.sum() - sc[me]) * itemsize, (rc.sum() - rc[me]) * itemsize
        self.stats.count_exchange(sent, received, 0, sc[self.far].sum() * itemsize,
                                  rc[self.far].sum() * itemsize)
        self.stats.count_convert(sent, received)

    def _rows_side(self, f: int) -> tuple[np.ndarray, np.ndarray, list]:
        """Per rank, values of my rows exchanged with it, the feature blocks' bounds, and
        per feature block y (None where empty) the flat start of each of my rows' block y
        in the row side's buffer; made once per width."""
        found = self._sides.get(f)
        if found is None:
            bounds = stage_ranges(f, self.rank_of.shape[1])
            widths = np.diff(bounds)
            counts = np.zeros(self.comm.Get_size(), dtype=np.int64)
            counts[self.rank_of] = self.counts[:, None] * widths[None, :]
            displ = displacements(counts)
            starts = [displ[self.rank_of[self.b_row, y]] + self.k_row * int(w) if w else None
                      for y, w in enumerate(widths)]
            found = self._sides[f] = (counts, bounds, starts)
        return found

    def to_blocks(self, x):
        """My rows (all features) -> my block, features F_y (a new array)."""
        be = self.backend
        dtype = be.dtype(x)
        sc, bounds, starts = self._rows_side(x.shape[1])
        send = be.empty((int(sc.sum()),), dtype)
        for y, start in enumerate(starts):
            if start is not None:
                be.put_spans(send, start, x[:, bounds[y]:bounds[y + 1]])
        w = int(bounds[self.y + 1] - bounds[self.y])
        rc = self.from_rank * w
        recv = be.empty((int(rc.sum()),), dtype)
        with self.stats.timing("seconds_exchange"):
            self.link.alltoallv(send, sc, recv, rc, self.stats, "convert")
        self._count(sc, rc, dtype.itemsize)
        block = be.empty((self.n_block, w), dtype)
        be.put_at(block, self.recv_perm, recv.reshape(self.n_block, w))
        return block

    def to_rows(self, block, out) -> None:
        """My block (features F_y) -> my rows, all features (the reverse of ``to_blocks``)."""
        be = self.backend
        dtype = be.dtype(out)
        rc, bounds, starts = self._rows_side(out.shape[1])
        sc = self.from_rank * block.shape[1]
        send = be.take_at(block, self.recv_perm).reshape(-1)
        recv = be.empty((int(rc.sum()),), dtype)
        with self.stats.timing("seconds_exchange"):
            self.link.alltoallv(send, sc, recv, rc, self.stats, "convert")
        self._count(sc, rc, dtype.itemsize)
        for y, start in enumerate(starts):
            if start is not None:
                out[:, bounds[y]:bounds[y + 1]] = be.take_spans(recv, start,
                                                                int(bounds[y + 1] - bounds[y]))


class Plexus3D(DistSpMM):
    name = "plexus3d"
    grid_kinds = ("3d",)

    def __init__(self, grid: ProcessGrid, partition, block_row, col_partition=None,
                 permute_seed: int = 0, **options):
        if isinstance(permute_seed, bool) or not isinstance(permute_seed, (int, np.integer)) \
                or permute_seed < 0:
            raise collective_error(f"plexus3d: permute_seed must be an integer >= 0, got "
                                   f"{permute_seed!r}")
        super().__init__(grid, partition, block_row, col_partition, **options)
        shape = tuple(grid.shape)
        x, y, z = grid.coords
        X, Y, Z = shape
        self.X, self.Z = X, Z
        self.permute_seed = int(permute_seed)
        row_pos, col_pos = plexus_orders(self.m, self.n, int(permute_seed))
        self.row_bounds, self.col_bounds, rank_of = plexus_blocks(shape, self.m, self.n)
        comm = grid.comm
        far = ~grid.node_map(comm).same
        be, link = self.backend, grid.link(comm)
        self.rows = BlockConversion(comm, self.row_offsets, row_pos, self.row_bounds,
                                    rank_of[0], z * X + x, y, self.stats, far, be, link)
        self.cols = BlockConversion(comm, self.col_offsets, col_pos, self.col_bounds,
                                    rank_of[1], x * Z + z, y, self.stats, far, be, link)
        self.along_x, self.along_z = grid.comm_along("row"), grid.comm_along("layer")
        self.far_x = ~grid.node_map(self.along_x).same
        self.far_z = ~grid.node_map(self.along_z).same
        self.x, self.z = x, z
        # my tile A[R_z, C_x], local numbering; every rank of my feature line gets a copy
        r, c, v = coo_of(block_row, self.lo)
        pr, pc = row_pos[r], col_pos[c]
        rz = (np.searchsorted(self.row_bounds, pr, side="right") - 1) // X
        cx = (np.searchsorted(self.col_bounds, pc, side="right") - 1) // Z
        dest = ((cx[:, None] * Y + np.arange(Y)) * Z + rz[:, None]).ravel()
        coo = tuple(np.repeat(a, Y) for a in (pr, pc, v))
        gr, gc, gv = redistribute(comm, coo, dest)
        r0, r1 = self.row_bounds[z * X], self.row_bounds[(z + 1) * X]
        c0, c1 = self.col_bounds[x * Z], self.col_bounds[(x + 1) * Z]
        tile = local_csr(gr - r0, gc - c0, gv, (int(r1 - r0), int(c1 - c0)))
        self.tile = (tile.indptr.astype(np.int64), tile.indices.astype(np.int32),
                     tile.data.astype(np.float64))
        self.tile_nnz = int(tile.nnz)
        self.on_backend = be.tile(*self.tile, tile.shape)   # float64, multiplied as called

    def local_nnz(self) -> int:
        return self.tile_nnz

    def local_matrices(self) -> list:
        return []   # one fixed kernel on the tile

    def backend_blocks(self) -> list:
        return []   # the tile keeps no transposed copy to drop

    def all_gather(self, comm: MPI.Comm, block, bounds: np.ndarray, far: np.ndarray):
        """All-gather the blocks ``bounds`` splits a range into, along ``comm`` (one of the
        grid's communicators); returns a new array."""
        be = self.backend
        w, dtype = block.shape[1], be.dtype(block)
        counts = np.diff(bounds) * w
        full = be.empty((int(bounds[-1] - bounds[0]), w), dtype)
        with self.stats.timing("seconds_exchange"):
            self.grid.link(comm).allgatherv(block, full, counts, self.stats, "gather")
        peers, nbytes = comm.Get_size() - 1, be.nbytes(block)
        self.stats.count_exchange(nbytes * peers, be.nbytes(full) - nbytes, 0,
                                  nbytes * int(far.sum()),
                                  int(counts[far].sum()) * dtype.itemsize)
        return full

    def reduce_scatter(self, comm: MPI.Comm, partial, bounds: np.ndarray, far: np.ndarray):
        """Sum ``partial`` along ``comm`` (one of the grid's communicators; ``partial`` may
        be overwritten); I keep my block of ``bounds``, in a new array."""
        be = self.backend
        w, me, dtype = partial.shape[1], comm.Get_rank(), be.dtype(partial)
        counts = np.diff(bounds) * w
        mine = be.empty((int(bounds[me + 1] - bounds[me]), w), dtype)
        with self.stats.timing("seconds_exchange"):
            self.grid.link(comm).reduce_scatter(partial, mine, counts, self.stats, "scatter")
        own = int(counts[me]) * dtype.itemsize
        self.stats.count_exchange(be.nbytes(partial) - own, own * (comm.Get_size() - 1), 0,
                                  int(counts[far].sum()) * dtype.itemsize,
                                  own * int(far.sum()))
        return mine

    def _matmul(self, x, out, key: int) -> None:
        X, Z, be = self.X, self.Z, self.backend
        h = self.all_gather(self.along_z, self.cols.to_blocks(x),
                            self.col_bounds[self.x * Z:(self.x + 1) * Z + 1], self.far_z)
        partial = be.zeros((self.tile[0].size - 1, h.shape[1]), be.dtype(x))
        if h.shape[1] and self.tile_nnz:
            with self.stats.timing("seconds_multiply"):
                self.on_backend.matmul(h, partial, accumulate=True)
        z = self.reduce_scatter(self.along_x, partial,
                                self.row_bounds[self.z * X:(self.z + 1) * X + 1], self.far_x)
        self.rows.to_rows(z, out)

    def _matmul_t(self, y, out, key: int) -> None:
        X, Z, be = self.X, self.Z, self.backend
        yv = self.all_gather(self.along_x, self.rows.to_blocks(y),
                             self.row_bounds[self.z * X:(self.z + 1) * X + 1], self.far_x)
        n_cols = int(self.col_bounds[(self.x + 1) * Z] - self.col_bounds[self.x * Z])
        partial = be.zeros((n_cols, yv.shape[1]), be.dtype(y))
        if yv.shape[1] and self.tile_nnz:
            with self.stats.timing("seconds_multiply"):
                self.on_backend.t_matmul(yv, partial, accumulate=True)
        z = self.reduce_scatter(self.along_z, partial,
                                self.col_bounds[self.x * Z:(self.x + 1) * Z + 1], self.far_z)
        self.cols.to_rows(z, out)
