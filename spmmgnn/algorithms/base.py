"""``DistSpMM``: a sparse m x n matrix A spread by block rows over a ProcessGrid, multiplied
with tall-skinny dense matrices whose rows are spread the same way.

Two layouts, as PETSc's MPIAIJ has: the *row layout* places the m rows of A and of the
output ``A @ X`` (``partition``), the *column layout* places the n rows of the input X
(``col_partition``). Block row i of both lives on the ranks of grid block row i. A square A
uses one layout for both unless told otherwise. ``matmul_t`` swaps the sides: its input is
laid out like the rows of A, its output like the columns.

Construction is collective and builds the plan once (layouts, local splits, halo plan, index
lists, counts); ``matmul`` / ``matmul_t`` only move and multiply numbers. Each subclass in
this package implements one paper algorithm; the registry ``ALGORITHMS`` (filled by the
package's ``__init__``) maps names to classes.

The class is assembled from one module per concern: ``construct`` (the factories and the
checks before construction), ``rows`` (scatter and gather of rows), ``validate`` (each call's
checks and agreement), ``linalg`` (reductions, QR, rows by id); this module holds the state,
the two products and the reports. Every algorithm is written once against its grid's
``backend`` (numpy or torch arrays) and transport (``grid.link``).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from ..exchange.auto_plan import EXCHANGES, exchange_plan
from ..exchange.tiers import network
from ..grid import ProcessGrid
from ..layout import Partition
from ..local import kernels
from ..local.hashing import mix64, uniform_by_id
from ..runtime.errors import (
    SpmmgnnError,
    collective_error,
)
from ..runtime.stats import CommStats
from ..runtime.threads import ensure_threads, scope, serial_enter, serial_exit
from .construct import Construction
from .linalg import RowAlgebra
from .registry import ALGORITHMS, kernel_counts
from .rows import RowsInOut
from .validate import CALLS, SIDES, Validation

__all__ = ["ALGORITHMS", "CALLS", "SIDES", "DistSpMM"]
SERIAL_WORK = kernels.SERIAL_WORK  # (non-zeros + rows) x columns of a call on one thread below


class DistSpMM(Construction, RowsInOut, Validation, RowAlgebra):
    """Distributed SpMM operator. Build with ``from_scipy``, ``from_block_row`` or
    ``from_edge_index`` (on this class with ``algorithm=``, or on an algorithm's class).
    Reductions, QR and rows by id over its layouts: ``linalg.RowAlgebra``.

    Attributes (read-only; "this rank" values differ per rank):

    * ``m``, ``n``, ``shape``: the global shape of A (m output rows, n input rows).
    * ``n_local``: this rank's rows of the output side (A, ``A @ X``, ``matmul_t``'s
      input); ``n_local_in``: of the input side (X, ``A.T @ Y``). ``row_ids(side)``: their
      global ids in the caller's numbering.
    * ``partition`` / ``col_partition``: the row (output) and column (input) layouts, each
      a ``Partition`` (``offsets``, ``perm``, ``k``); ``row_offsets`` / ``col_offsets``
      their offsets; ``lo:hi`` / ``col_lo:col_hi`` this rank's block, relabelled.
    * ``grid`` (the ProcessGrid), ``block`` (this rank's block row), ``symmetric`` (True,
      False, or None until ``probe_symmetry()``), ``validate``, ``name``, ``stats``.
    """

    name: ClassVar[str] = "base"
    # capabilities, read by the trainer, the volume model and the sweep (never the name):
    grid_kinds: ClassVar[tuple[str, ...]] = ("1d",)  # the ProcessGrid kinds it runs on
    takes_codecs: ClassVar[bool] = False     # codec= / codec_backward= compress its exchange
    delayed_remote: ClassVar[bool] = False   # DistGNN cd-R / 0c can wrap it (delayed.py)
    stale_remote: ClassVar[bool] = False     # its remote rows may be stale (delayed views)
    takes_exchange: ClassVar[bool] = False   # exchange="node" / "auto" (node_exchange.py)

    def __init__(self, grid: ProcessGrid, partition: Partition, block_row: sp.csr_array,
                 col_partition: Partition | None = None, validate: bool = True,
                 exchange: str = "flat", exchange_model: str | None = None, **unknown):
        self.check_grid(grid)
        # the options are agreed by every rank before construction: the same verdict on all
        if exchange not in EXCHANGES:
            raise collective_error(f"exchange must be one of {', '.join(EXCHANGES)}, got "
                                   f"{exchange!r}")
        if exchange != "flat" and not self.takes_exchange:
            raise collective_error(f"{self.name} has no halo exchange to make node-aware: "
                                   "exchange='flat' (the sparse algorithms take 'node', "
                                   "'auto')")
        try:
            network(exchange_model)
        except ValueError as exc:
            raise collective_error(f"exchange_model: {exc}") from None
        self.exchange, self.exchange_model = exchange, exchange_model
        if unknown:
            raise SpmmgnnError(f"{self.name}: unknown options {sorted(unknown)}"
                               + (" (codecs compress the row exchange of the sparse "
                                  "algorithms)" if {"codec", "codec_backward"} & set(unknown)
                                  else ""))
        if exchange != "flat" and grid.transport.name != "mpi":
            raise collective_error(
                f"exchange={exchange!r} moves rows through MPI's shared-memory windows and "
                f"node communicators; this grid's transport is {grid.transport.describe()}, "
                "which moves them between the ranks of a node itself (NCCL: NVLink or PCIe): "
                "use exchange='flat', or build the grid with transport='mpi'")
        self.grid = grid
        self.backend = grid.backend  # where the numbers live (spmmgnn.backend)
        self.device = grid.device    # None (host backend) or the torch device
        self.partition = partition
        self.col_partition = partition if col_partition is None else col_partition
        self.row_offsets = partition.offsets
        self.col_offsets = self.col_partition.offsets
        self.m, self.n = int(self.row_offsets[-1]), int(self.col_offsets[-1])
        b = grid.block_row
        self.block = b
        self.lo, self.hi = int(self.row_offsets[b]), int(self.row_offsets[b + 1])
        self.col_lo, self.col_hi = int(self.col_offsets[b]), int(self.col_offsets[b + 1])
        self.n_local = self.hi - self.lo              # rows of A @ X (and of Y in matmul_t)
        self.n_local_in = self.col_hi - self.col_lo    # rows of X (and of A.T @ Y)
        self.stats = CommStats()
        self.validate = bool(validate)
        self.symmetric: bool | None = None  # A.T == A; set by probe_symmetry() or the user
        self._auto_stream = 0
        grid.row_counts.update({(self.n_local, self.m), (self.n_local_in, self.n)})
        ensure_threads(grid.comm)

    @property
    def shape(self) -> tuple[int, int]:
        return self.m, self.n

    def row_ids(self, side: str = "output") -> np.ndarray:
        """Original (caller's) index of each local row: of A and ``A @ X`` (``"output"``),
        or of X and ``A.T @ Y`` (``"input"``, the columns of A)."""
        part, _ = self._side(side)
        return (part.ids(self.col_lo, self.col_hi) if side == "input" else
                part.ids(self.lo, self.hi))

    @property
    def offsets(self) -> np.ndarray:
        """Row layout block offsets (equal to the column layout's for square A)."""
        return self.row_offsets

    # ---------------------------------------------------------------- multiply
    def matmul(self, X_local, stream: int | None = None):
        """Collective. This rank's rows of ``A @ X``, given this rank's rows of X.

        ``stream`` keys the stochastic rounding of a codec (same stream, same bits: a
        resumed run repeats the uninterrupted one); None draws the next value of a
        per-operator counter."""
        vector = getattr(X_local, "ndim", 0) == 1
        x = self.check_local(X_local.reshape(-1, 1) if vector else X_local, "matmul",
                             self.n_local_in)
        be = self.backend
        out = be.out((self.n_local, x.shape[1]), be.dtype(x))
        self.stats.calls_matmul += 1
        key = self.rounding_key(stream, 0) if self.keyed() else 0
        self._in_threads(self._matmul, x, out, key)
        return be.like(out[:, 0] if vector else out, X_local)

    def matmul_t(self, Y_local, stream: int | None = None):
        """Collective. This rank's rows of ``A.T @ Y``, given this rank's rows of Y."""
        vector = getattr(Y_local, "ndim", 0) == 1
        y = self.check_local(Y_local.reshape(-1, 1) if vector else Y_local, "matmul_t",
                             self.n_local)
        be = self.backend
        out = be.out((self.n_local_in, y.shape[1]), be.dtype(y))
        self.stats.calls_matmul_t += 1
        key = self.rounding_key(stream, 1) if self.keyed() else 0
        self._in_threads(self._matmul_t, y, out, key)
        return be.like(out[:, 0] if vector else out, Y_local)

    def _in_threads(self, run, x, out, key: int) -> None:
        """``run(x, out, key)`` on the library's threads (one for a tiny call), the caller's
        after: ``scope(1)``'s setting without the scope object when one thread runs it."""
        limit = self.call_threads(x.shape[1])
        if limit != 1:
            with scope(limit):
                run(x, out, key)
            return
        before = serial_enter()
        try:
            run(x, out, key)
        finally:
            serial_exit(before)

    def call_threads(self, f: int) -> int | None:
        """1 for a call on f columns whose local work ((non-zeros + rows) x f) is below
        ``SERIAL_WORK``, else None (the library's threads): waking a second thread for a
        tiny product costs more than the product (a numba parallel region on a 64-row
        matrix took ~150 us against ~2 us on one thread at load ~17, bench/percall.py)."""
        serial_below = self.__dict__.get("_serial_below")  # the widest serial call + 1
        if serial_below is None:
            try:
                work = self.local_nnz() + self.n_local + self.n_local_in
            except NotImplementedError:
                work = SERIAL_WORK
            serial_below = self._serial_below = -(-SERIAL_WORK // max(1, work))
        return 1 if f < serial_below else None

    def keyed(self) -> bool:
        """Whether a codec reads the calls' rounding keys (``rounding_key``): without one the
        key is never used, and a call skips computing it (~1.3 us of Python hashing)."""
        found = self.__dict__.get("_keyed")
        if found is None:
            found = self._keyed = (getattr(self, "codec", None) is not None
                                   or getattr(self, "codec_backward", None) is not None)
        return found

    def rounding_key(self, stream: int | None, direction: int) -> int:
        """The key of a codec's stochastic rounding for one call: ``stream`` and the direction
        (0 ``matmul``, 1 ``matmul_t``), or the next of a hidden counter without a stream."""
        if stream is None:
            self._auto_stream += 1
            return mix64(0xA570, self._auto_stream, direction)
        return mix64(stream, direction)

    def _matmul(self, x, out, key: int) -> None:
        """``out = A x`` on this rank's rows (backend arrays)."""
        raise NotImplementedError

    def _matmul_t(self, y, out, key: int) -> None:
        """``out = A^T y`` on this rank's rows (backend arrays)."""
        raise NotImplementedError

    def probe_symmetry(self, seed: int = 12345) -> bool:
        """Collective: is ``A.T == A``? Compares ``A x`` with ``A.T x`` for two random vectors
        (float64; a non-symmetric A is caught with probability 1). Sets ``self.symmetric``;
        the statistics are left as they were. When symmetric, the transposed copies the
        probe built are freed (``matmul_t`` would build them again if called)."""
        same_layout = (self.partition is self.col_partition
                       or (np.array_equal(self.row_offsets, self.col_offsets)
                           and self.partition.same_order(self.col_partition)))
        if not same_layout:  # the same for every rank: no collective needed to agree
            self.symmetric = False
            return False
        saved = dataclasses.replace(self.stats)
        ids = np.arange(self.lo, self.hi, dtype=np.int64)
        x = np.column_stack([uniform_by_id(ids, seed + k) - 0.5 for k in range(2)])
        be = self.backend  # (the backend's own products, compared on the host)
        xb = be.from_host(x)
        ax, atx = be.to_host(self.matmul(xb)), be.to_host(self.matmul_t(xb))
        local = np.array([np.abs(ax - atx).max(initial=0.0), np.abs(ax).max(initial=0.0)])
        worst = np.empty_like(local)
        self.grid.comm.Allreduce(local, worst, op=MPI.MAX)
        self.stats.load(saved)
        self.symmetric = bool(worst[0] <= 1e-10 * max(worst[1], 1e-300))
        if self.symmetric:  # A.T y runs as A y from now on: the probe's transposes go
            for m in [*self.local_matrices(), *self.backend_blocks()]:
                m.drop_transpose()
        return self.symmetric

    def keep_values(self, dtype) -> None:
        """Keep the local matrices' values in ``dtype`` only (``LocalCSR.keep_values``): a
        float32 training run, once ``probe_symmetry`` has run in float64, frees the float64
        values (8 bytes per non-zero). A later call in float64 still works, on the float32
        values widened (exact casts, but the float32-rounded matrix)."""
        for m in self.local_matrices():
            m.keep_values(dtype)
        for b in self.backend_blocks():
            if hasattr(b, "keep_values") and b not in self.local_matrices():
                b.keep_values(dtype)

    def release_exchange_buffers(self) -> None:
        """Collective in effect (every rank at the same point): free the pooled buffers of
        the row exchanges and their persistent requests (``Route.release_buffers``; a
        node-aware plan's shared windows too);
        the trainer drops the float64 probe's this way (3 arrays of ghost or send rows x 2
        float64). The next calls allocate what they use again."""
        for plan in self.exchange_plans():
            if hasattr(plan, "release_buffers"):
                plan.release_buffers()

    # ---------------------------------------------------------------- reporting
    def comm_stats(self) -> dict:
        """This rank's cumulative counters (bytes, calls, seconds) as a dict, with
        ``kernels``: how many of its local products ran each kernel variant."""
        d = self.stats.as_dict()
        d.update(algorithm=self.name, rank=self.grid.rank, rows=self.n_local,
                 kernels=kernel_counts(self.kernel_choices()), exchange=self.exchange_report())
        return d

    def exchange_plans(self) -> list:
        """The halo plans of this operator's row exchange (none for the oblivious ones)."""
        return []

    def halo_plan(self, comm: MPI.Comm, owner_offsets: np.ndarray, ghost_ids: np.ndarray,
                  codec=None, codec_backward=None, seed: int = 0, stream: int | None = None):
        """Collective: the halo plan of this operator's ``exchange`` option (flat, node-aware
        or auto) for ``ghost_ids`` on ``comm``, one of the grid's communicators, counting into
        ``self.stats``."""
        return exchange_plan(self.exchange, comm, owner_offsets, ghost_ids, self.stats, codec,
                             codec_backward, seed, stream, self.grid.node_map(comm),
                             self.exchange_model, self.backend, self.grid.link(comm))

    def exchange_report(self) -> dict:
        """The ``exchange`` option and, with ``auto``, what each plan chose so far per
        direction and bytes per row (``{"bcast 256 B/row": "node"}``)."""
        chosen: dict[str, list[str]] = {}
        for plan in self.exchange_plans():
            for label, kind in getattr(plan, "choices", {}).items():
                chosen.setdefault(label, [])
                if kind not in chosen[label]:
                    chosen[label].append(kind)
        return dict(option=self.exchange,
                    chosen={k: "/".join(sorted(v)) for k, v in sorted(chosen.items())})

    def local_matrices(self) -> list:
        """The ``LocalCSR`` blocks this rank multiplies."""
        return self.product.matrices()

    def backend_blocks(self) -> list:
        """The same blocks as the backend multiplies them (the ``LocalCSR`` themselves on
        the host backend, torch CSR tensors on the torch backend)."""
        blocks = getattr(self.product, "blocks_on_backend", None)
        return blocks() if blocks is not None else []

    def kernel_choices(self) -> list[dict]:
        """Each local block's kernel choices so far (``LocalCSR.kernel_report``), tagged
        with the block's position in ``local_matrices()``; a transposed CSR built for
        ``matmul_t`` reports as the same block."""
        rows = []
        for i, m in enumerate(self.local_matrices()):
            rows += [dict(block=i, **r) for r in m.kernel_report()]
            if m.transposed is not None:
                rows += [{**r, "block": i, "op": "A^T x: transposed CSR x"}
                         for r in m.transposed.kernel_report()]
        return rows

    def reset_stats(self) -> None:
        self.stats.reset()

    def local_nnz(self) -> int:
        raise NotImplementedError

