"""The route of one ``sparse2d``/``sparse3d`` call: the sparse exchanges, or CAGNET's SUMMA.

The sparse route moves only the rows a tile names, but its fold sends full-width partial rows
where SUMMA sends a feature block, and SUMMA leaves some ranks without a tile to broadcast
(on a pr x pc grid with pc > pr, process columns j >= pr hold none): on such a rank the
sparse route can send more than ``oblivious2d``/``oblivious3d`` (a 2 x 3 grid, an ER graph
of average degree 8: 1.26x on ranks (0, 2) and (1, 2)). The promise is per rank, so each
call width, dtype and direction takes the sparse route only when no rank sends more bytes on
it than on SUMMA, both counted exactly as ``comm_stats()`` counts them (one collective
comparison per key, kept); otherwise every rank runs SUMMA for that key, its tiles laid out
from the sparse tiles on first use (collective, once). Both routes give A X exactly.

Only the flat exchange is routed: a node-aware plan (``exchange="node"``/``"auto"``) sends
more on its carriers by design, and always takes the sparse route.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from ..exchange.halo import HaloPlan
from ..runtime.stats import CommStats
from .summa import Summa, summa_sent
from .tiles import SummaTiles, grid_shape3


def wire_row_bytes(codec, f: int, dtype) -> int:
    """Bytes a row of f values of ``dtype`` takes in a halo exchange with ``codec``."""
    if HaloPlan.passthrough(codec, dtype):
        return f * np.dtype(dtype).itemsize
    return int(codec.row_bytes(f))


def plan_sent(plans: list, f: int, dtype, forward: bool) -> int:
    """Bytes this rank sends in one call over the sparse route: the forward runs the first
    plan's bcast and the others' reduces (expand, fold, fiber), the transpose the reverse."""
    total = 0
    for n, plan in enumerate(plans):
        bcast = (n == 0) == forward
        codec = plan.codec if bcast else plan.codec_backward
        total += plan.rows[bcast][0] * wire_row_bytes(codec, f, dtype)
    return total


class GridRoute:
    """Per (width, dtype, direction) the route of an operator's calls (collective)."""

    def __init__(self, grid, row_offsets: np.ndarray, col_offsets: np.ndarray, tiles,
                 tile_nnz_by_row: np.ndarray, stats: CommStats, routed: bool):
        """``tiles``: the operator's ``SparseTiles``; ``tile_nnz_by_row[k]``: non-zeros of my
        tile in the columns of process row k (summed along my process row, they are SUMMA's
        stage tiles); ``routed`` False: always sparse."""
        self.grid, self.tiles, self.stats, self.routed = grid, tiles, stats, routed
        self.row_offsets, self.col_offsets = row_offsets, col_offsets
        self.shape, self.coords = grid_shape3(grid)
        stage_nnz = np.ascontiguousarray(tile_nnz_by_row, dtype=np.int64)
        if routed:
            grid.comm_along("col").Allreduce(MPI.IN_PLACE, stage_nnz, op=MPI.SUM)
        self.stage_nnz = stage_nnz
        self.choices: dict[tuple, bool] = {}
        self.summa: Summa | None = None

    def oblivious(self, plans: list, f: int, dtype, forward: bool) -> bool:
        """True: this call runs SUMMA (some rank would send more on the sparse route)."""
        if not self.routed:
            return False
        key = (f, np.dtype(dtype).str, forward)
        if key not in self.choices:
            fwd, bwd = summa_sent(self.shape, self.coords, np.diff(self.row_offsets),
                                  np.diff(self.col_offsets), self.stage_nnz, f,
                                  np.dtype(dtype).itemsize)
            more = plan_sent(plans, f, dtype, forward) > (fwd if forward else bwd)
            self.choices[key] = bool(self.grid.comm.allreduce(int(more), op=MPI.MAX))
        return self.choices[key]

    def product(self, product) -> Summa:
        """SUMMA on this operator's grid, its tiles laid out from ``product``'s (an
        ``ExpandFold``) on first use (collective)."""
        if self.summa is None:
            rows, cols, vals = product.tile_coo()
            coo = (self.tiles.rows.global_ids(rows), self.tiles.cols.global_ids(cols), vals)
            st = SummaTiles(self.grid, self.row_offsets, self.col_offsets)
            self.summa = Summa(self.grid, st, st.gather_coo(self.grid.comm, coo), self.stats)
        return self.summa
