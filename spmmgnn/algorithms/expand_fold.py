"""The sparsity-aware product of one 2D tile: *expand*, multiply, *fold* (Boman, Devine and
Rajamanickam, SC'13, with 1D vectors), on the halo plan's verbs.

A rank holds a tile A[R, C] in local numbering. The columns C are owned by the ranks of
``col_comm`` (``col_offsets``), the rows R by the ranks of ``row_comm`` (``row_offsets``);
this rank owns one range of each. Split four ways (own/ghost rows x own/ghost columns):

    Z_own   = A[own, own] X_own + A[own, ghost] X_ghost      (+ partials peers fold in)
    Z_ghost = A[ghost, own] X_own + A[ghost, ghost] X_ghost  (folded to their owners)

*expand* is the column plan's bcast (only X rows in NnzCols of the tile travel), *fold* the
row plan's reduce (only partial rows in NnzRows travel). ``A^T Y`` runs both plans backwards:
bcast on the row plan, reduce on the column plan. Each exchange is posted before the block
product that does not need it, so rows travel while the rank multiplies.

Codecs: ``matmul`` (the training forward) encodes with ``codec`` in both phases, ``matmul_t``
with ``codec_backward``; the row plan is built with the two swapped, since its reduce belongs
to the forward.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from ..backend.host import HOST
from ..backend.protocol import Backend
from ..exchange.halo import HaloPlan
from ..local.local_matrix import LocalCSR
from ..runtime.stats import CommStats
from .ghost import GhostBlock


def split_tile(tile: sp.csr_array, rows: tuple[int, int], cols: tuple[int, int]):
    """``(blocks, ghost_row_ids, ghost_col_ids)``: the tile split by own row range ``rows`` and
    own column range ``cols``; ghost ids are the sorted non-empty others, and ``blocks`` maps
    ("own"|"ghost", "own"|"ghost") to a ``LocalCSR`` in (own or dense ghost) numbering."""
    m = sp.csr_array(tile)
    r = np.repeat(np.arange(m.shape[0], dtype=np.int64), np.diff(m.indptr))
    c = m.indices.astype(np.int64)
    own_r = (r >= rows[0]) & (r < rows[1])
    own_c = (c >= cols[0]) & (c < cols[1])
    ghost_rows = np.unique(r[~own_r])
    ghost_cols = np.unique(c[~own_c])
    lr = np.where(own_r, r - rows[0], np.searchsorted(ghost_rows, r))
    lc = np.where(own_c, c - cols[0], np.searchsorted(ghost_cols, c))
    n_rows = {"own": rows[1] - rows[0], "ghost": ghost_rows.size}
    n_cols = {"own": cols[1] - cols[0], "ghost": ghost_cols.size}
    blocks = {}
    for rk, rmask in (("own", own_r), ("ghost", ~own_r)):
        for ck, cmask in (("own", own_c), ("ghost", ~own_c)):
            keep = rmask & cmask
            blocks[rk, ck] = LocalCSR(sp.csr_array((m.data[keep], (lr[keep], lc[keep])),
                                                   shape=(n_rows[rk], n_cols[ck])))
    return blocks, ghost_rows, ghost_cols


class ExpandFold:
    """A tile with its expand (column) and fold (row) halo plans; collective to build."""

    def __init__(self, tile: sp.csr_array, col_comm: MPI.Comm, col_offsets: np.ndarray,
                 row_comm: MPI.Comm, row_offsets: np.ndarray, stats: CommStats,
                 codec=None, codec_backward=None, seed: int = 0, stream: int = 0,
                 make_plan=None, backend: Backend = HOST):
        """``make_plan`` as ``GhostProduct``'s (the operator's ``halo_plan``; None: flat);
        the blocks multiply on ``backend`` (the grid's, as the plans')."""
        cr, rr = col_comm.Get_rank(), row_comm.Get_rank()
        self.own_cols = (int(col_offsets[cr]), int(col_offsets[cr + 1]))
        self.own_rows = (int(row_offsets[rr]), int(row_offsets[rr + 1]))
        self.blocks, ghost_rows, ghost_cols = split_tile(tile, self.own_rows, self.own_cols)
        self.ghost_rows, self.ghost_cols = ghost_rows, ghost_cols
        if make_plan is None:
            def make_plan(comm, offsets, ghosts, fwd, bwd, seed, stream):
                return HaloPlan(comm, offsets, ghosts, stats, fwd, bwd, seed=seed, stream=stream,
                                backend=backend)
        self.expand = make_plan(col_comm, col_offsets, ghost_cols, codec, codec_backward, seed,
                                2 * stream)
        self.fold = make_plan(row_comm, row_offsets, ghost_rows, codec_backward, codec, seed,
                              2 * stream + 1)
        self.stats = stats
        self.backend = backend
        b = self.on_backend = {k: backend.block(m) for k, m in self.blocks.items()}
        # the expanded rows multiply the ghost-column blocks (read in place inside a node
        # sharing memory); the fold's partial sums are made where its reduce reads them
        self.expanded = GhostBlock([b["ghost", "ghost"], b["own", "ghost"]], self.expand, stats,
                               ("ghost", "partial"))
        self.folded = GhostBlock([], self.fold, stats, ("ghost", "partial"))

    @property
    def nnz(self) -> int:
        return sum(b.nnz for b in self.blocks.values())

    def tile_coo(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The tile's non-zeros as (rows, columns, float64 values) in the tile's numbering,
        put back together from the four blocks (to lay A out another way, once)."""
        ids = {"rows": {"own": None, "ghost": self.ghost_rows},
               "cols": {"own": None, "ghost": self.ghost_cols}}
        start = {"rows": self.own_rows[0], "cols": self.own_cols[0]}
        out = ([], [], [])
        for (rk, ck), block in self.blocks.items():
            m = block.to_scipy().tocoo()
            for axis, key, local in (("rows", rk, m.row), ("cols", ck, m.col)):
                local = local.astype(np.int64)
                named = ids[axis][key]
                out[0 if axis == "rows" else 1].append(local + start[axis] if named is None
                                                       else named[local])
            out[2].append(m.data.astype(np.float64))
        return np.concatenate(out[0]), np.concatenate(out[1]), np.concatenate(out[2])

    def matrices(self) -> list:
        return list(self.blocks.values())

    def blocks_on_backend(self) -> list:
        return list(self.on_backend.values())

    def matmul(self, x, out, key: int) -> None:
        """out = A x for my own rows (``x``: my own columns' rows of X)."""
        b, stats = self.on_backend, self.stats
        fold_plan, partial = self.folded.partials(x.shape[1], self.backend.dtype(x))
        expand = self.expanded.start_bcast(x, key)
        with stats.timing("seconds_multiply"):
            b["ghost", "own"].matmul(x, partial, accumulate=False)
            b["own", "own"].matmul(x, out, accumulate=False)
        ghost_x = self.expanded.land(expand)
        self.expanded.times(0, expand, ghost_x, partial)     # + A[ghost, ghost] X_ghost
        fold = fold_plan.start_reduce(partial, out, key)
        self.expanded.times(1, expand, ghost_x, out)         # + A[own, ghost] X_ghost
        fold.finish()

    def matmul_t(self, y, out, key: int) -> None:
        """out = A^T y for my own columns (``y``: my own rows' rows of Y). The spread rows
        of Y land in the fold plan's ghost buffer (its blocks multiply them transposed,
        whose terms a renaming would reorder); the partial sums of the gather are made
        where its reduce reads them."""
        b, stats = self.on_backend, self.stats
        expand_plan, partial = self.expanded.partials(y.shape[1], self.backend.dtype(y))
        spread = self.folded.start_bcast(y, key, in_place=False)
        with stats.timing("seconds_multiply"):
            b["own", "ghost"].t_matmul(y, partial, accumulate=False)
            b["own", "own"].t_matmul(y, out, accumulate=False)
        ghost_y = self.folded.land(spread)
        with stats.timing("seconds_multiply"):
            b["ghost", "ghost"].t_matmul(ghost_y, partial, accumulate=True)
        gather = expand_plan.start_reduce(partial, out, key)
        with stats.timing("seconds_multiply"):
            b["ghost", "own"].t_matmul(ghost_y, out, accumulate=True)
        gather.finish()
