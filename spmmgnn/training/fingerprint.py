"""A fingerprint of the training data, stored in checkpoints so ``--resume`` refuses other data.

Four 64-bit sums, one per part a user can change without changing any size: ``features``,
``labels``, ``split`` and ``structure`` (the adjacency's pattern after normalization). Each is a
sum mod 2**64 of a hash of (vertex id in the source graph, that vertex's content) -- per row for
the first three, per non-zero (target id, source id) for the structure. A sum does not depend on
the order of the terms, so each rank adds its own rows and one Allreduce gives the same value at
any P, partition or path (in memory or HDF5 block rows). Edge values are left out on purpose:
normalized on different ranks they may differ in the last bit; the normalization itself is part
of the run's signature (the model).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from ..data.splits import SPLITS
from ..local.hashing import hash_rows, keyed_sum

PARTS = ("features", "labels", "split", "structure")
_SEEDS = dict(features=0xFEA7, labels=0x1AB7, split=0x5B17, structure=0x57C7)


def structure_sum(A, row_ids: np.ndarray, col_ids: np.ndarray | None = None,
                  per_nonzero: bool = False) -> int:
    """This block row's share of the structure part: rows and columns mapped to source-graph
    ids (``col_ids`` None: the columns already are; else the id of each column, or with
    ``per_nonzero`` of each non-zero's column)."""
    A = sp.csr_array(A)
    rows = np.repeat(np.asarray(row_ids, dtype=np.int64), np.diff(A.indptr))
    cols = (A.indices.astype(np.int64) if col_ids is None else
            np.asarray(col_ids, dtype=np.int64) if per_nonzero else
            np.asarray(col_ids)[A.indices])
    return int(keyed_sum(rows, cols, _SEEDS["structure"]))


STRUCTURE_CHUNK = 1 << 22  # non-zeros hashed at a time by ``block_structure_sum``


def block_structure_sum(rows_comm: MPI.Comm, offsets: np.ndarray, block: int, A,
                        row_ids: np.ndarray) -> int:
    """Collective over ``rows_comm`` (rank b owning rows offsets[b]:offsets[b+1]): this
    block row's share of the structure part, ``A`` holding rows of ``block`` with global
    columns in the relabelled numbering and ``row_ids`` the source id of each row (as
    ``structure_sum(A, row_ids, col_ids, per_nonzero=True)`` with each column's source id
    fetched from its owner). Fetches the ids once per distinct ghost column and hashes the
    non-zeros ``STRUCTURE_CHUNK`` at a time (the sum is taken mod 2^64, so the chunks add
    up to the same value), instead of an int64 id array of every non-zero."""
    from ..data.normalize import fetch_owned_values
    from ..local.split import ghost_columns

    A = sp.csr_array(A)
    lo, hi = int(offsets[block]), int(offsets[block + 1])
    row_ids = np.asarray(row_ids, dtype=np.int64)
    ghost = ghost_columns(A.indices, lo, hi, A.shape[1])
    ghost_src = fetch_owned_values(rows_comm, offsets, row_ids, ghost)
    total = 0
    indptr = A.indptr
    start = 0
    while start < A.shape[0]:
        stop = int(np.searchsorted(indptr, indptr[start] + STRUCTURE_CHUNK, side="right")) - 1
        stop = min(max(stop, start + 1), A.shape[0])
        a, b = int(indptr[start]), int(indptr[stop])
        rows = np.repeat(row_ids[start:stop], np.diff(indptr[start:stop + 1]))
        cols = A.indices[a:b].astype(np.int64)
        own = (cols >= lo) & (cols < hi)
        cols[own] = row_ids[cols[own] - lo]
        cols[~own] = ghost_src[np.searchsorted(ghost, cols[~own])]
        total += int(keyed_sum(rows, cols, _SEEDS["structure"]))
        start = stop
    return total & (2**64 - 1)


def fingerprint(rows_comm: MPI.Comm, vertex_ids: np.ndarray, features: np.ndarray,
                labels: np.ndarray, masks: dict[str, np.ndarray], structure: int) -> dict:
    """Collective over ``rows_comm`` (one rank per block row). ``structure``: the global
    structure sum (already reduced). Returns {part: 16 hex digits}."""
    ids = np.asarray(vertex_ids, dtype=np.int64)
    split_bits = sum(np.asarray(masks[s], dtype=np.uint64) << np.uint64(i)
                     for i, s in enumerate(SPLITS))
    values = _sums(rows_comm, [
        keyed_sum(ids, hash_rows(features), _SEEDS["features"]),
        keyed_sum(ids, np.asarray(labels, dtype=np.int64).view(np.uint64), _SEEDS["labels"]),
        keyed_sum(ids, split_bits, _SEEDS["split"]),
    ]) + [int(structure) & (2**64 - 1)]
    return {p: f"{v:016x}" for p, v in zip(PARTS, values, strict=True)}


def _sums(rows_comm: MPI.Comm, values: list[int]) -> list[int]:
    """Element-wise sums mod 2**64 over the ranks of ``rows_comm``."""
    buf = np.array([int(v) & (2**64 - 1) for v in values], dtype=np.uint64)
    rows_comm.Allreduce(MPI.IN_PLACE, [buf, MPI.UINT64_T], op=MPI.SUM)
    return [int(v) for v in buf]


def reduce_sum(rows_comm: MPI.Comm, value: int) -> int:
    """Sum mod 2**64 of one uint64 per rank of ``rows_comm``."""
    return _sums(rows_comm, [value])[0]
