"""Feature-parallel SpMM (MixGCN's "mixture of parallelism", §3.1).

A is replicated on every rank; the dense matrix is split by feature columns for the sparse
product and by rows everywhere else. One SpMM is two all-to-alls around a local product:

1. rows -> columns: rank p sends its rows of X, cut into the ranks' feature-column blocks
   (``X[rows_p, cols_q]`` to q), and receives all n rows of its own columns ``cols_p``;
2. ``Z[:, cols_p] = A @ X[:, cols_p]`` with the whole A, no communication;
3. columns -> rows: rank p sends ``Z[rows_q, cols_p]`` to q and gets back its own rows.

Bytes per rank do not depend on the partition: p sends ``n_p (f - f_p) + (m - m_p) f_p``
elements per ``matmul`` (n_p, m_p its input and output rows, f_p its feature columns), so the
total is ``(n + m) f (P - 1) / P`` for near-equal blocks: two all-to-alls of the whole matrix.
``matmul_t`` is the same with ``A^T`` and the layouts swapped. The price is memory: every rank
holds all of A, so ``preflight`` estimates it and refuses before anything is built.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from ..exchange.halo import displacements
from ..layout import Partition
from ..local.local_matrix import LocalCSR
from ..runtime.machine import available_bytes, format_bytes_apart, ranks_on_this_node
from ..runtime.stats import CommStats
from ..runtime.wire import allgather_json
from .base import DistSpMM

# bytes per non-zero of the replicated A: float64 value + index, a float32 copy, the transposed
# CSR built for matmul_t, and the gathered arrays during construction
BYTES_PER_NNZ = 2 * (8 + 8 + 4) + 16
BYTES_PER_ROW = 3 * 8
USABLE_MEMORY = 0.7  # of the available memory per rank on its node


def replicated_bytes(shape: tuple[int, int], nnz: int) -> int:
    """Estimated peak bytes per rank of holding all of A (values, indices, both orientations)."""
    return int(nnz * BYTES_PER_NNZ + (shape[0] + shape[1] + 2) * BYTES_PER_ROW)


class FeatureParallel(DistSpMM):
    name = "featureparallel"

    def __init__(self, grid, partition, block_row, col_partition=None,
                 memory_budget: int | None = None, **options):
        super().__init__(grid, partition, block_row, col_partition, **options)
        self.comm = grid.comm
        self.far = ~grid.node_map(grid.comm).same   # peers on other nodes (bytes by tier)
        self.link = grid.link(grid.comm)
        self.A = LocalCSR(_allgather_rows(self.comm, block_row, self.n))
        self.on_backend = self.backend.block(self.A)
        self.rows_in = np.diff(self.col_offsets)   # rows of X per rank
        self.rows_out = np.diff(self.row_offsets)  # rows of A @ X per rank
        self.buffers = self.backend.pool()
        self._feature_cols: dict[int, np.ndarray] = {}

    @classmethod
    def preflight(cls, grid, shape, nnz, memory_budget: int | None = None, **options):
        """Refuse (with the estimate) when the replicated A would not fit in memory."""
        need = replicated_bytes(shape, nnz)
        if memory_budget is None:
            avail = available_bytes()
            if avail is None:
                return None
            memory_budget = int(USABLE_MEMORY * avail / ranks_on_this_node(grid.comm))
        if need > memory_budget:
            need_text, have_text = format_bytes_apart(need, memory_budget)
            return (f"featureparallel replicates A on every rank: about {need_text} "
                    f"per rank for {shape[0]:,} x {shape[1]:,} with {nnz:,} non-zeros, more "
                    f"than the {have_text} available per rank; use "
                    "sparse1d or more nodes")
        return None

    def local_nnz(self) -> int:
        return self.A.nnz

    def local_matrices(self) -> list:
        return [self.A]

    def backend_blocks(self) -> list:
        return [self.on_backend]

    def _matmul(self, x, out, key: int) -> None:
        self._product(x, out, self.rows_in, self.rows_out, transpose=False)

    def _matmul_t(self, y, out, key: int) -> None:
        self._product(y, out, self.rows_out, self.rows_in, transpose=True)

    def _product(self, x, out, rows_in: np.ndarray, rows_out: np.ndarray,
                 transpose: bool) -> None:
        """out = (A or A^T) x: rows -> feature columns, local product, columns -> rows."""
        me, stats, dtype = self.comm.Get_rank(), self.stats, self.backend.dtype(x)
        f = x.shape[1]
        cols = self._feature_offsets(f)
        fp = int(cols[me + 1] - cols[me])
        width = np.diff(cols)
        xc = self.buffers.get("xc", (int(rows_in.sum()), fp), dtype)
        zc = self.buffers.get("zc", (int(rows_out.sum()), fp), dtype)
        # 1. rows -> columns: to q, my rows of its columns (q-major, contiguous per q)
        send = self.buffers.get("send", (x.shape[0] * f,), dtype)
        with stats.timing("seconds_exchange"):
            _column_blocks(x, cols, send, pack=True)
        self._alltoallv(send, x.shape[0] * width, xc.reshape(-1), rows_in * fp, me)
        # 2. the whole A (or A^T) times my columns
        with stats.timing("seconds_multiply"):
            if fp == 0:  # fewer feature columns than ranks: nothing to multiply here
                pass
            elif transpose:
                self.on_backend.t_matmul(xc, zc, accumulate=False)
            else:
                self.on_backend.matmul(xc, zc, accumulate=False)
        # 3. columns -> rows: rows of q go to q (contiguous in zc); unpack by source column
        recv = self.buffers.get("recv", (out.shape[0] * f,), dtype)
        self._alltoallv(zc.reshape(-1), rows_out * fp, recv, out.shape[0] * width, me)
        with stats.timing("seconds_exchange"):
            _column_blocks(out, cols, recv, pack=False)

    def _feature_offsets(self, f: int) -> np.ndarray:
        """Feature-column blocks: near-equal, the first ``f % P`` ranks one column more."""
        if f not in self._feature_cols:
            self._feature_cols[f] = Partition.contiguous(f, self.comm.Get_size()).offsets
        return self._feature_cols[f]

    def _alltoallv(self, send, send_counts: np.ndarray, recv, recv_counts: np.ndarray,
                   me: int) -> None:
        """One all-to-all of flat arrays (element counts); bytes count what leaves and
        enters this rank."""
        stats: CommStats = self.stats
        sc, rc = send_counts.astype(np.int64), recv_counts.astype(np.int64)
        with stats.timing("seconds_exchange"):
            self.link.alltoallv(send, sc, recv, rc, stats, "columns")
        item = self.backend.dtype(send).itemsize
        stats.count_exchange(int(sc.sum() - sc[me]) * item, int(rc.sum() - rc[me]) * item, 0,
                             int(sc[self.far].sum()) * item, int(rc[self.far].sum()) * item)



def _column_blocks(dense, cols: np.ndarray, flat, pack: bool) -> None:
    """``flat`` holds ``dense``'s feature-column blocks one after the other (block q is
    ``dense[:, cols[q]:cols[q+1]]``, row-major): pack copies dense into flat, else back."""
    rows, pos = dense.shape[0], 0
    for lo, hi in zip(cols[:-1], cols[1:], strict=True):
        block = flat[pos:pos + rows * (hi - lo)].reshape(rows, hi - lo)
        if pack:
            block[...] = dense[:, lo:hi]
        else:
            dense[:, lo:hi] = block
        pos += rows * (hi - lo)


def _allgather_rows(comm: MPI.Comm, block_row: sp.csr_array, n: int) -> sp.csr_array:
    """Every rank's block row, stacked in rank order: all of A on every rank."""
    block_row = sp.csr_array(block_row)
    lengths = np.diff(block_row.indptr).astype(np.int64)
    indices = block_row.indices.astype(np.int64)
    data = block_row.data.astype(np.float64)
    rows = np.array(allgather_json(comm, lengths.size), dtype=np.int64)
    nnz = np.array(allgather_json(comm, indices.size), dtype=np.int64)
    all_lengths = np.empty(int(rows.sum()), dtype=np.int64)
    all_indices = np.empty(int(nnz.sum()), dtype=np.int64)
    all_data = np.empty(int(nnz.sum()), dtype=np.float64)
    comm.Allgatherv([lengths, MPI.INT64_T], [all_lengths, (rows, displacements(rows)), MPI.INT64_T])
    comm.Allgatherv([indices, MPI.INT64_T], [all_indices, (nnz, displacements(nnz)), MPI.INT64_T])
    comm.Allgatherv([data, MPI.DOUBLE], [all_data, (nnz, displacements(nnz)), MPI.DOUBLE])
    indptr = np.concatenate(([0], np.cumsum(all_lengths)))
    return sp.csr_array((all_data, all_indices, indptr), shape=(all_lengths.size, n))
