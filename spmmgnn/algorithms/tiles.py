"""Where the non-zeros of A live on a 2D or 3D grid, and how they get there.

The dense rows keep the 1D layout: the vertices are split into P parts (any partition), part
``p = (i pc + j) pl + l`` is owned by rank (i, j, l) (2D: pl = 1, l = 0). A set of parts is
numbered locally by concatenating the parts in a given order (``PartSet``). The algorithms
place A by tiles of these sets:

* the sparse algorithms (``sparse2d``/``sparse3d``): rank (i, j, l) holds
  A[I_i, J_jl] with I_i the parts of process row i (all columns, all layers) and J_jl the
  parts of process column j in layer l, so the rows of X a tile needs are owned along the
  grid's ``row`` dimension and the rows it produces along ``col`` (and ``layer``);
* SUMMA (``oblivious2d``/``oblivious3d``): see ``summa.py``.

``redistribute`` moves each rank's block row (what ``from_scipy`` scatters and what an HDF5
file gives) to the tiles in one ``Alltoallv``: O(nnz / P) per rank, done once.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from ..exchange.halo import displacements
from ..grid import ProcessGrid


class PartSet:
    """An ordered set of parts, numbered 0.. by concatenating the parts' vertices."""

    def __init__(self, parts: np.ndarray, offsets: np.ndarray):
        self.parts = np.asarray(parts, dtype=np.int64)
        self.global_offsets = offsets
        sizes = np.diff(offsets)[self.parts]
        self.offsets = displacements(np.append(sizes, 0))  # local start of each part, + total
        self.position = np.full(offsets.size - 1, -1, dtype=np.int64)
        self.position[self.parts] = np.arange(self.parts.size)

    @property
    def size(self) -> int:
        return int(self.offsets[-1])

    def local(self, ids: np.ndarray, parts: np.ndarray) -> np.ndarray:
        """Local numbers of global ``ids`` of the given ``parts`` (all in the set)."""
        return ids - self.global_offsets[parts] + self.offsets[self.position[parts]]

    def global_ids(self, local: np.ndarray) -> np.ndarray:
        """The global ids of local numbers (the inverse of ``local``)."""
        k = np.searchsorted(self.offsets, local, side="right") - 1
        return self.global_offsets[self.parts[k]] + local - self.offsets[k]

    def span(self, p: int) -> tuple[int, int]:
        """The local range of part p."""
        k = int(self.position[p])
        return int(self.offsets[k]), int(self.offsets[k + 1])


def grid_shape3(grid: ProcessGrid) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(pr, pc, pl) and (i, j, l) of a 2D or 3D grid (a 2D grid is one layer)."""
    shape, coords = tuple(grid.shape), tuple(grid.coords)
    if len(shape) == 2:
        shape, coords = (*shape, 1), (*coords, 0)
    return shape, coords


def part_of(shape: tuple[int, int, int], i, j, l):
    """The part owned by rank (i, j, l) (vectorized)."""
    pr, pc, pl = shape
    return (np.asarray(i) * pc + j) * pl + l


def part_coords(shape: tuple[int, int, int], p: np.ndarray):
    """(i, j, l) of the owners of parts p."""
    pr, pc, pl = shape
    rest, l = np.divmod(p, pl)
    i, j = np.divmod(rest, pc)
    return i, j, l


def owner_part(offsets: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """The part of each global id."""
    return np.searchsorted(offsets, ids, side="right") - 1


def coo_of(block_row: sp.csr_array, row_lo: int):
    """(global rows, global columns, values) of a block row whose rows start at ``row_lo``."""
    m = sp.csr_array(block_row)
    rows = row_lo + np.repeat(np.arange(m.shape[0], dtype=np.int64), np.diff(m.indptr))
    return rows, m.indices.astype(np.int64), m.data.astype(np.float64)


def redistribute(comm: MPI.Comm, coo: tuple[np.ndarray, np.ndarray, np.ndarray],
                 dest: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Send every non-zero (rows, columns, values) to the rank ``dest`` names; returns the
    (rows, columns, values) this rank received, ordered by sender, then as sent."""
    order = np.argsort(dest, kind="stable")
    size = comm.Get_size()
    send_counts = np.bincount(dest, minlength=size).astype(np.int64)
    recv_counts = np.empty(size, dtype=np.int64)
    comm.Alltoall(send_counts, recv_counts)
    sd, rd = displacements(send_counts), displacements(recv_counts)
    total = int(recv_counts.sum())
    got = []
    for arr in coo:
        mpitype = MPI.DOUBLE if arr.dtype == np.float64 else MPI.INT64_T
        out = np.empty(total, dtype=arr.dtype)
        comm.Alltoallv([np.ascontiguousarray(arr[order]), (send_counts, sd), mpitype],
                       [out, (recv_counts, rd), mpitype])
        got.append(out)
    return got[0], got[1], got[2]


def local_csr(rows: np.ndarray, cols: np.ndarray, vals: np.ndarray,
              shape: tuple[int, int]) -> sp.csr_array:
    """A CSR of local (rows, cols, vals), duplicates summed, indices sorted."""
    m = sp.csr_array((vals, (rows, cols)), shape=shape)
    m.sum_duplicates()
    m.sort_indices()
    return m


class SparseTiles:
    """Rank (i, j, l) holds the tile A[I_i, J_jl] (``sparse2d``/``sparse3d``).

    * ``rows``: I_i, the parts of process row i ordered (j, l): fiber (i, j) is contiguous;
    * ``cols``: J_jl, the parts (i', j, l) ordered by i' (the owners along ``row``);
    * ``fold_offsets``: I_i split by the fibers (i, j', .) of the ranks along ``col``;
    * ``fiber``: fiber (i, j)'s parts ordered by l (the ranks along ``layer``).
    """

    def __init__(self, grid: ProcessGrid, row_offsets: np.ndarray, col_offsets: np.ndarray):
        self.shape, (i, j, l) = grid_shape3(grid)
        pr, pc, pl = self.shape
        jj, ll = np.divmod(np.arange(pc * pl), pl)
        self.rows = PartSet(part_of(self.shape, i, jj, ll), row_offsets)
        self.cols = PartSet(part_of(self.shape, np.arange(pr), j, l), col_offsets)
        self.fold_offsets = self.rows.offsets[::pl]      # fiber j' = parts j' pl .. j' pl + pl
        self.fiber = PartSet(part_of(self.shape, i, j, np.arange(pl)), row_offsets)
        self.row_offsets, self.col_offsets = row_offsets, col_offsets
        self.me = int(part_of(self.shape, i, j, l))

    def dest(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """The rank holding each non-zero: row coordinate of its row's owner, column and
        layer coordinates of its column's owner."""
        i, _, _ = part_coords(self.shape, owner_part(self.row_offsets, rows))
        _, j, l = part_coords(self.shape, owner_part(self.col_offsets, cols))
        return part_of(self.shape, i, j, l)

    def gather(self, comm: MPI.Comm, block_row: sp.csr_array, row_lo: int) -> sp.csr_array:
        """Collective: my tile, in local numbering (rows of I_i x columns of J_jl)."""
        coo = coo_of(block_row, row_lo)
        r, c, v = redistribute(comm, coo, self.dest(coo[0], coo[1]))
        lr = self.rows.local(r, owner_part(self.row_offsets, r))
        lc = self.cols.local(c, owner_part(self.col_offsets, c))
        return local_csr(lr, lc, v, (self.rows.size, self.cols.size))


class SummaTiles:
    """What CAGNET's SUMMA (``oblivious2d``/``oblivious3d``) needs on rank (i, j, l).

    * ``in_rows`` / ``out_rows``: U_il, the parts (i, ., l) ordered by j, of the column layout
      (rows of X) and of the row layout (rows of A X): the rows of my dense block;
    * ``inner[k]``: U_kl of the column layout, the inner dimension of stage k of layer l;
    * ``rows``: V_i, all parts of process row i ordered (l, j), the rows of my partial result,
      so each layer's share U_il is one contiguous range (``layer_offsets``);
    * the tile A[V_i, U_kl] of stage k is held by rank (i, k mod pc, l) (CAGNET: (i, k)).
    """

    def __init__(self, grid: ProcessGrid, row_offsets: np.ndarray, col_offsets: np.ndarray):
        self.shape, (i, j, l) = grid_shape3(grid)
        pr, pc, pl = self.shape
        self.i, self.j, self.l = i, j, l
        js = np.arange(pc)
        self.in_rows = PartSet(part_of(self.shape, i, js, l), col_offsets)
        self.out_rows = PartSet(part_of(self.shape, i, js, l), row_offsets)
        self.inner = [PartSet(part_of(self.shape, k, js, l), col_offsets) for k in range(pr)]
        ll, jj = np.divmod(np.arange(pc * pl), pc)
        self.rows = PartSet(part_of(self.shape, i, jj, ll), row_offsets)
        self.layer_offsets = self.rows.offsets[::pc]
        self.row_offsets, self.col_offsets = row_offsets, col_offsets
        self.stages = [k for k in range(pr) if k % pc == j]   # the tiles I hold

    def dest(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        i, _, _ = part_coords(self.shape, owner_part(self.row_offsets, rows))
        k, _, l = part_coords(self.shape, owner_part(self.col_offsets, cols))
        return part_of(self.shape, i, k % self.shape[1], l)

    def gather(self, comm: MPI.Comm, block_row: sp.csr_array,
               row_lo: int) -> dict[int, sp.csr_array]:
        """Collective: my tiles ``{k: A[V_i, U_kl]}`` in local numbering."""
        return self.gather_coo(comm, coo_of(block_row, row_lo))

    def gather_coo(self, comm: MPI.Comm, coo: tuple[np.ndarray, np.ndarray, np.ndarray]
                   ) -> dict[int, sp.csr_array]:
        """Collective: my tiles from any rank's share of the non-zeros (global rows,
        columns, values): the block rows, or the tiles another layout holds."""
        r, c, v = redistribute(comm, coo, self.dest(coo[0], coo[1]))
        cp = owner_part(self.col_offsets, c)
        k_of = part_coords(self.shape, cp)[0]
        lr = self.rows.local(r, owner_part(self.row_offsets, r))
        tiles = {}
        for k in self.stages:
            keep = k_of == k
            lc = self.inner[k].local(c[keep], cp[keep])
            tiles[k] = local_csr(lr[keep], lc, v[keep], (self.rows.size, self.inner[k].size))
        return tiles
