"""Rows in and out of an operator's layouts: ``scatter_rows`` (a full matrix on root to
every rank's block row) and ``gather_rows`` (the reverse), in the caller's row order. The
rows travel through MPI on the host (``Scatterv`` / ``Gatherv`` over the ranks with root's
replica index, then a broadcast to the other replicas); on a torch backend the local block
comes from or goes to the device, counted as the ``device_host`` tier. A mixin of
``DistSpMM``.
"""

from __future__ import annotations

import numpy as np

from ..backend.convert import FLOAT_DTYPES, is_torch, mpi_float_type, to_numpy
from ..layout import Partition
from ..runtime.errors import SpmmgnnError, check_on_root
from ..runtime.wire import bcast_json
from .validate import SIDES, local_input_error


class RowsInOut:
    """``scatter_rows``, ``gather_rows`` and the sides' layouts (a mixin of ``DistSpMM``)."""

    def _side(self, side: str) -> tuple[Partition, int]:
        if side not in SIDES:
            raise SpmmgnnError(f"side must be 'input' or 'output', got {side!r}")
        return ((self.col_partition, self.n_local_in) if side == "input"
                else (self.partition, self.n_local))

    def scatter_rows(self, X, root: int = 0, side: str = "input"):
        """Collective. Root passes a full dense matrix in original order; every rank gets its
        block row's rows (numpy or torch, like root's input).

        ``side="input"``: X has n rows (the input of ``matmul``); ``"output"``: m rows (the
        input of ``matmul_t``)."""
        comm = self.grid.comm
        if self.validate:  # the same call, side and root on every rank before root's checks
            self.check_local(np.zeros((0, 0)), "scatter_rows", 0, side, root)
        part, n_local = self._side(side)

        def check():
            error = local_input_error(X, "scatter_rows", self.backend.device)
            if error:
                raise SpmmgnnError(error)
            x = (self.backend.to_host(X, self.stats) if self.backend.is_native(X) else
                 to_numpy(X, "scatter_rows"))
            if x.ndim == 1:
                x = x.reshape(-1, 1)
            if x.ndim != 2 or x.shape[0] != part.n:
                raise SpmmgnnError(f"scatter_rows: X must have {part.n} rows ({side} side), "
                                   f"got shape {tuple(x.shape)}"
                                   + (self._side_hint(side) if x.ndim and self.m != self.n
                                      and x.shape[0] in (self.m, self.n) else ""))
            if x.dtype not in FLOAT_DTYPES:
                raise SpmmgnnError(f"X must be float32 or float64, got {x.dtype}")
            return np.ascontiguousarray(x[part.perm]), x.shape[1], x.dtype.str

        got = check_on_root(comm, root, check)
        xp, f, dt = got if got is not None else (None, None, None)
        f, dt, as_torch, vector = bcast_json(comm, (f, dt, is_torch(X),
                                                    getattr(X, "ndim", 0) == 1), root)
        local = np.empty((n_local, f), dtype=np.dtype(dt))
        self._rows_collective(xp, local, part.offsets, root, scatter=True)
        return self.backend.returned(local[:, 0] if vector else local, as_torch, self.stats)

    def gather_rows(self, Z_local, root: int = 0, side: str = "output"):
        """Collective. The full matrix in original order on root, None elsewhere.

        ``side="output"``: this rank's rows of ``A @ X``; ``"input"``: of ``A.T @ Y``."""
        vector = getattr(Z_local, "ndim", 0) == 1
        z = self._check_side(Z_local.reshape(-1, 1) if vector else Z_local, "gather_rows",
                             side, root)
        z = self.backend.to_host(z, self.stats)
        part = self._side(side)[0]
        comm = self.grid.comm
        full = np.empty((part.n, z.shape[1]), dtype=z.dtype) if comm.Get_rank() == root else None
        self._rows_collective(full, z, part.offsets, root, scatter=False)
        if full is None:
            return None
        out = np.empty_like(full)
        out[part.perm] = full
        return self.backend.returned(out[:, 0] if vector else out, is_torch(Z_local))

    def _rows_collective(self, full, local, offsets: np.ndarray, root: int,
                         scatter: bool) -> None:
        """Scatterv/Gatherv of block rows between root and the ranks with root's replica
        index, then a broadcast to the other replicas of each block row."""
        grid = self.grid
        root_row, root_rep = divmod(root, grid.replication)
        f = local.shape[1]
        mpitype = mpi_float_type(local.dtype)
        counts = np.diff(offsets) * f
        displs = offsets[:-1] * f
        if grid.replica == root_rep:
            spec = [full, (counts, displs), mpitype] if grid.rank == root else None
            if scatter:
                grid.across_block_rows.Scatterv(spec, [local, mpitype], root=root_row)
            else:
                grid.across_block_rows.Gatherv([local, mpitype], spec, root=root_row)
        if scatter and grid.replication > 1:
            grid.across_replicas.Bcast([local, mpitype], root=root_rep)
