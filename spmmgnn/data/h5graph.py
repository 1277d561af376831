"""The project's HDF5 graph file: written once after partitioning, read block row by block row.

Layout (format "spmmgnn-graph", version 1)::

    attrs   format, version, n, nnz, k, num_classes (if labels), directed,
            partition_method, partition_seconds (if a partitioner made the offsets)
    offsets (k+1,) int64     block row b owns relabelled vertices offsets[b]:offsets[b+1]
    perm    (n,)   int64     perm[new] = vertex id in the source graph
    adj/indptr  (n+1,) int64 CSR of the relabelled adjacency (row = target vertex)
    adj/indices (nnz,) int32|int64
    adj/data    (nnz,) float32|float64   optional; absent means all ones
    features (n, f) float32   optional
    labels   (n,)   int64     optional (-1 = unlabelled)
    masks/train, masks/val, masks/test  (n,) bool   optional

A rank reads only ``indptr[lo:hi+1]`` and the matching slice of indices/data/features, so no
rank loads the whole graph.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import h5py
import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from ..exchange.halo import displacements
from ..runtime import signals
from ..runtime.atomic import SinkFile, atomic_path
from ..runtime.errors import SpmmgnnError, collective_error
from .limits import MAX_INFLATION

FORMAT = "spmmgnn-graph"
VERSION = 1
MASKS = ("train", "val", "test")


@dataclass
class BlockRow:
    """One block row of a graph file: rows lo:hi of the relabelled graph."""

    lo: int
    hi: int
    n: int
    adj: sp.csr_array  # (hi - lo) x n, global relabelled columns
    features: np.ndarray | None
    labels: np.ndarray | None
    masks: dict[str, np.ndarray]
    num_classes: int
    offsets: np.ndarray
    perm: np.ndarray | None  # the whole perm (None: not stored, or read with whole_perm=False)
    directed: bool = False
    ids: np.ndarray | None = None  # perm[lo:hi]: the source-graph ids of these rows
    partition_method: str | None = None  # what made the offsets (None: not recorded)


def write_graph(path, adj, offsets=None, perm=None, features=None, labels=None, masks=None,
                num_classes: int | None = None, directed: bool = False,
                partition: dict | None = None) -> None:
    """Write an already relabelled graph atomically (a crash never leaves a half file).
    ``partition``: the ``method`` and ``seconds`` of the partitioner that made ``offsets``,
    kept as attributes (the training run's header names the method)."""
    adj = sp.csr_array(adj)
    n = adj.shape[0]
    if adj.shape != (n, n):
        raise SpmmgnnError(f"adjacency must be square, got {adj.shape}")
    offsets = np.asarray([0, n] if offsets is None else offsets, dtype=np.int64)
    if offsets[0] != 0 or offsets[-1] != n or np.any(np.diff(offsets) < 0):
        raise SpmmgnnError("block offsets must rise from 0 to n")
    with h5_writer(path, _file_bytes(adj, offsets, features, labels, masks)) as h:
        h.attrs.update(format=FORMAT, version=VERSION, n=n, nnz=int(adj.nnz),
                       k=offsets.size - 1, directed=bool(directed))
        if partition:
            h.attrs.update(partition_method=str(partition["method"]),
                           partition_seconds=float(partition["seconds"]))
        h["offsets"] = offsets
        h["perm"] = np.arange(n, dtype=np.int64) if perm is None else np.asarray(perm, np.int64)
        g = h.create_group("adj")
        # no copy where the dtype already fits (a copy of the graph is what a large write
        # cannot afford)
        g["indptr"] = adj.indptr.astype(np.int64, copy=False)
        g["indices"] = adj.indices.astype(np.int32 if n < 2**31 - 1 else np.int64,
                                          copy=False)
        if not _all_ones(adj.data):
            g["data"] = adj.data
        if features is not None:
            h.create_dataset("features", data=np.asarray(features, dtype=np.float32),
                             chunks=True)
        if labels is not None:
            labels = np.asarray(labels, dtype=np.int64)
            h["labels"] = labels
            h.attrs["num_classes"] = int(num_classes if num_classes is not None
                                         else labels.max() + 1)
        for name, m in (masks or {}).items():
            h[f"masks/{name}"] = np.asarray(m, dtype=bool)


def _all_ones(data: np.ndarray) -> bool:
    """Every value is 1 (the data array is then not stored), in chunks of bounded memory."""
    step = 1 << 24
    return all(bool(np.all(data[i:i + step] == 1)) for i in range(0, data.size, step))


def _file_bytes(adj: sp.csr_array, offsets, features, labels, masks) -> int:
    """An upper bound on the bytes ``write_graph`` writes: its arrays as stored, 2 % for
    chunk indexes and 1 MiB for HDF5's own metadata."""
    n, nnz = adj.shape[0], int(adj.nnz)
    size = 8 * (offsets.size + n + n + 1) + nnz * (4 if n < 2**31 - 1 else 8)
    size += 0 if _all_ones(adj.data) else 8 * nnz
    size += 0 if features is None else 4 * int(np.prod(np.shape(features)))
    size += (0 if labels is None else 8 * n) + n * len(masks or {})
    return size + size // 50 + 2**20


@contextmanager
def h5_writer(path, size: int) -> Iterator[h5py.File]:
    """An HDF5 file open for writing that replaces ``path`` atomically once complete.

    ``size`` (bytes, an upper bound) is checked against the free space first. HDF5 writes
    through ``atomic.SinkFile``, so a disk that fills up anyway (or a signal) never makes a
    write fail inside HDF5 -- which ends in a segmentation fault when it happens while h5py
    closes a dataset -- and signals wait until HDF5 has closed the file; either then ends as
    one error (or the signal's exit) with the old file kept and no temporary left."""
    with atomic_path(path, "graph file", size=size) as tmp, signals.deferred():
        sink = SinkFile(tmp)
        try:
            with h5py.File(sink, "w") as h:
                yield h
        except BaseException:
            sink.close(quiet=True)
            raise
        sink.close()


# h5py raises these (and OSError) for corrupt files; readers turn them into SpmmgnnError
H5_ERRORS = (OSError, KeyError, ValueError, TypeError, IndexError, RuntimeError, OverflowError,
             AttributeError)


def _open(path) -> h5py.File:
    try:
        h = h5py.File(path, "r")
    except H5_ERRORS as exc:
        raise SpmmgnnError(f"cannot open graph file {path}: {exc}") from None
    try:
        ok = h.attrs.get("format") == FORMAT
    except H5_ERRORS:
        ok = False
    if not ok:
        h.close()
        raise SpmmgnnError(f"{path} is not a {FORMAT} HDF5 file")
    return h


def _corrupt(path, exc: Exception) -> SpmmgnnError:
    return SpmmgnnError(f"cannot read graph file {path}: corrupt ({type(exc).__name__}: {exc})")


def _dataset(h: h5py.File, path, key: str, shape0: int | None = None,
             kinds: str = "iuf") -> h5py.Dataset:
    """``h[key]`` after checking its kind, first dimension and that its size fits the file
    (``limits.MAX_INFLATION`` times the file size: nothing larger is ever allocated)."""
    ds = h[key]
    if not isinstance(ds, h5py.Dataset) or ds.dtype.kind not in kinds or ds.ndim < 1:
        raise SpmmgnnError(f"{path}: {key} is not a numeric array")
    if shape0 is not None and ds.shape[0] != shape0:
        raise SpmmgnnError(f"{path}: {key} has {ds.shape[0]} rows, expected {shape0}")
    if ds.size * ds.dtype.itemsize > MAX_INFLATION * h.id.get_filesize() + 2**16:
        raise SpmmgnnError(f"{path}: {key} declares {ds.shape}, more than the file holds")
    return ds


def _offsets(h: h5py.File, path) -> tuple[int, np.ndarray]:
    """The checked vertex count and block offsets."""
    n = h.attrs["n"]
    if not isinstance(n, (int, np.integer)) or n < 0:
        raise SpmmgnnError(f"{path}: attribute n must be a non-negative integer, got {n!r}")
    n = int(n)
    _dataset(h, path, "adj/indptr", n + 1, "iu")
    offsets = _dataset(h, path, "offsets", None, "iu")[...].astype(np.int64)
    if (offsets.ndim != 1 or offsets.size < 2 or offsets[0] != 0 or offsets[-1] != n
            or np.any(np.diff(offsets) < 0)):
        raise SpmmgnnError(f"{path}: block offsets must rise from 0 to n = {n}")
    return n, offsets


def read_offsets(path) -> np.ndarray:
    with _open(path) as h:
        try:
            return _offsets(h, path)[1]
        except SpmmgnnError:
            raise
        except H5_ERRORS as exc:
            raise _corrupt(path, exc) from None


def _adjacency(h: h5py.File, path, n: int, lo: int, hi: int) -> sp.csr_array:
    indptr = _dataset(h, path, "adj/indptr", n + 1, "iu")[lo:hi + 1].astype(np.int64)
    nnz = _dataset(h, path, "adj/indices", None, "iu").shape[0]
    if np.any(np.diff(indptr) < 0) or indptr[0] < 0 or indptr[-1] > nnz:
        raise SpmmgnnError(f"{path}: adj/indptr is not a valid CSR row pointer")
    a, b = int(indptr[0]), int(indptr[-1])
    # the indices as stored (int32 below 2^31 columns) and the pointers in their type, so
    # scipy keeps both without a copy; the values read once, as float64
    index = np.int32 if n < 2**31 - 1 and b - a < 2**31 - 1 else np.int64
    indices = h["adj/indices"][a:b]
    data = (np.asarray(_dataset(h, path, "adj/data", nnz)[a:b], dtype=np.float64)
            if "adj/data" in h else np.ones(b - a))
    if indices.size and (indices.min() < 0 or indices.max() >= n):  # before any narrowing
        raise SpmmgnnError(f"{path}: column index out of range in rows {lo}:{hi}")
    indices = indices.astype(index, copy=False)
    return sp.csr_array((data, indices, (indptr - a).astype(index)), shape=(hi - lo, n))


def _block_row(h: h5py.File, path, lo, hi, block, whole_perm: bool) -> BlockRow:
    n, offsets = _offsets(h, path)
    if block is not None:
        if not 0 <= block < offsets.size - 1:
            raise SpmmgnnError(f"{path} has {offsets.size - 1} block rows, no block {block}")
        lo, hi = int(offsets[block]), int(offsets[block + 1])
    lo = 0 if lo is None else int(lo)
    hi = n if hi is None else int(hi)
    if not 0 <= lo <= hi <= n:
        raise SpmmgnnError(f"{path}: rows {lo}:{hi} are outside 0:{n}")
    features = (_dataset(h, path, "features", n, "f")[lo:hi] if "features" in h else None)
    if features is not None and features.ndim != 2:
        raise SpmmgnnError(f"{path}: features must be n x f")
    stored = _dataset(h, path, "perm", n, "iu") if "perm" in h else None
    ids = (stored[lo:hi].astype(np.int64) if stored is not None
           else np.arange(lo, hi, dtype=np.int64))
    if ids.size and (ids.min() < 0 or ids.max() >= n):
        bad = int(np.flatnonzero((ids < 0) | (ids >= n))[0])
        raise SpmmgnnError(f"{path}: perm is not a permutation of 0..{n - 1}: perm[{lo + bad}]"
                           f" = {int(ids[bad])}")
    whole = stored[...].astype(np.int64) if stored is not None and whole_perm else None
    if whole is not None:
        _check_permutation(path, whole, n)
    return BlockRow(
        lo=lo, hi=hi, n=n, adj=_adjacency(h, path, n, lo, hi), features=features,
        labels=_dataset(h, path, "labels", n, "iu")[lo:hi] if "labels" in h else None,
        masks={m: _dataset(h, path, f"masks/{m}", n, "biu")[lo:hi].astype(bool)
               for m in MASKS if f"masks/{m}" in h},
        num_classes=int(h.attrs.get("num_classes", 0)),
        offsets=offsets, perm=whole,
        directed=bool(h.attrs.get("directed", False)), ids=ids,
        partition_method=_text_attr(h, "partition_method"),
    )


def _text_attr(h: h5py.File, key: str) -> str | None:
    value = h.attrs.get(key)
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return value if isinstance(value, str) else None


def _perm_error(path, n: int, count: int, first: int) -> str:
    return (f"{path}: perm is not a permutation of 0..{n - 1}: {count} id(s) appear more than "
            f"once (first: {first}); the file is damaged or was not written by spmmgnn: "
            "write it again (spmmgnn datasets / partition)")


def _check_permutation(path, perm: np.ndarray, n: int) -> None:
    """SpmmgnnError unless ``perm`` (ids already checked to lie in 0..n-1) holds each id
    once."""
    seen = np.bincount(perm, minlength=n)
    if np.any(seen > 1):
        dup = np.flatnonzero(seen > 1)
        raise SpmmgnnError(_perm_error(path, n, int(dup.size), int(dup[0])))


def check_perm_distributed(comm: MPI.Comm, path, ids: np.ndarray, n: int) -> None:
    """Collective over ``comm`` (one rank per block row, together holding perm's n ids, each
    already in 0..n-1): the same error on every rank unless every id appears once. Each id
    goes to the rank owning its range of near-equal id ranges (one ``Alltoallv``), which
    counts its ids: O(n / P) time and memory per rank."""
    k, me = comm.Get_size(), comm.Get_rank()
    bounds = np.linspace(0, n, k + 1).astype(np.int64)
    ids = np.sort(np.asarray(ids, dtype=np.int64))
    send = np.diff(np.searchsorted(ids, bounds)).astype(np.int64)
    recv = np.empty(k, dtype=np.int64)
    comm.Alltoall(send, recv)
    mine = np.empty(int(recv.sum()), dtype=np.int64)
    comm.Alltoallv([ids, (send, displacements(send)), MPI.INT64_T],
                   [mine, (recv, displacements(recv)), MPI.INT64_T])
    seen = np.bincount(mine - bounds[me], minlength=int(bounds[me + 1] - bounds[me]))
    dup = np.flatnonzero(seen > 1) + bounds[me]
    count = comm.allreduce(int(dup.size), op=MPI.SUM)
    if count:
        first = comm.allreduce(int(dup[0]) if dup.size else n, op=MPI.MIN)
        raise collective_error(_perm_error(path, n, count, first))


def read_block_row(path, lo: int | None = None, hi: int | None = None,
                   block: int | None = None, whole_perm: bool = True) -> BlockRow:
    """Read rows lo:hi (or block row ``block``) without touching the rest of the file
    (with ``whole_perm=False`` not even the rest of ``perm``: ``ids`` holds its rows' part).

    ``adj`` is stored as ``Graph.adj`` (row = target) and returned as-is. Every inconsistency
    of a corrupt file (sizes, offsets, indices) is one SpmmgnnError naming it."""
    with _open(path) as h:
        try:
            return _block_row(h, path, lo, hi, block, whole_perm)
        except SpmmgnnError:
            raise
        except H5_ERRORS as exc:
            raise _corrupt(path, exc) from None
