"""Block-row layout: which contiguous range of (relabelled) vertices each block row owns.

A *part vector* assigns every vertex to a block row. Vertices are relabelled so that every
block row is a contiguous range (a symmetric permutation of A); ``perm[new] = old`` keeps
the way back to the user's original order.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .runtime.errors import SpmmgnnError


class Partition:
    """A partition of ``n`` vertices into ``k`` block rows.

    ``parts[v]`` is the block row of original vertex v; ``perm[new] = old`` relabels vertices
    so block rows are contiguous; ``offsets[b]:offsets[b+1]`` is block row b in the new order.
    ``metrics`` holds the communication metrics once computed (see ``partitioners.metrics``);
    ``candidates`` what each partitioner a method ran gave (``method``, ``seconds``,
    ``total_volume``, ``max_send``), when it ran several and kept the best.

    Contiguous blocks (``from_sizes``, ``contiguous``) store only the k + 1 offsets: ``parts``
    and ``perm`` are then built when asked for, so a rank that holds one block row of a graph
    of n vertices keeps nothing of size n (``ids`` gives a block's vertex ids).
    """

    def __init__(self, parts: np.ndarray | None, k: int, perm: np.ndarray | None,
                 offsets: np.ndarray, metrics: Any = None, method: str = "given",
                 seconds: float = 0.0, candidates: list[dict] | None = None):
        self.k, self.offsets = _checked_offsets(k, offsets)
        self._perm = None if perm is None else _checked_perm(perm, self.n)
        self._parts = None if parts is None else _checked_parts(parts, self._perm,
                                                                self.offsets)
        self.metrics = metrics
        self.method = method
        self.seconds = seconds
        self.candidates = [] if candidates is None else candidates

    def __repr__(self) -> str:
        return (f"Partition(n={self.n}, k={self.k}, method={self.method!r}, "
                f"sizes={self.sizes.tolist() if self.k <= 16 else '...'})")

    @property
    def n(self) -> int:
        return int(self.offsets[-1])

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.offsets)

    @property
    def parts(self) -> np.ndarray:
        if self._parts is None:
            return np.repeat(np.arange(self.k, dtype=np.int64), self.sizes)
        return self._parts

    @property
    def perm(self) -> np.ndarray:
        if self._perm is None:
            return np.arange(self.n, dtype=np.int64)
        return self._perm

    def ids(self, lo: int, hi: int) -> np.ndarray:
        """``perm[lo:hi]``: the original ids of new vertices lo..hi-1, without building
        ``perm`` when there is none."""
        if self._perm is None:
            return np.arange(lo, hi, dtype=np.int64)
        return self._perm[lo:hi]

    def with_perm(self, perm: np.ndarray, method: str) -> Partition:
        """The same blocks with the vertices renumbered by ``perm`` (new -> old)."""
        perm = np.asarray(perm, dtype=np.int64)
        parts = np.empty_like(perm)
        parts[perm] = np.repeat(np.arange(self.k, dtype=np.int64), self.sizes)
        return Partition(parts, self.k, perm, self.offsets.copy(), self.metrics, method,
                         self.seconds, list(self.candidates))

    @property
    def iperm(self) -> np.ndarray:
        """``iperm[old] = new``."""
        perm = self.perm
        inv = np.empty_like(perm)
        inv[perm] = np.arange(perm.shape[0], dtype=perm.dtype)
        return inv

    @property
    def is_identity(self) -> bool:
        return self._perm is None or bool(np.array_equal(self._perm, np.arange(self.n)))

    def same_order(self, other: Partition) -> bool:
        """Do both relabel the vertices alike (``perm`` equal)?"""
        if self.n != other.n:
            return False
        if self.is_identity and other.is_identity:
            return True
        return bool(np.array_equal(self.perm, other.perm))

    @classmethod
    def from_parts(cls, parts, k: int, method: str = "given") -> Partition:
        """Blocks from a part vector; stable within a block, so original order is kept inside."""
        p = np.asarray(parts)
        if p.ndim != 1:
            raise SpmmgnnError(f"a part vector must be one-dimensional, got shape {p.shape}")
        if p.dtype.kind not in "iuf":  # complex, strings, objects, booleans
            raise SpmmgnnError(f"a part vector must hold integer block-row ids, got {p.dtype}")
        if p.size and not np.issubdtype(p.dtype, np.integer):
            if not np.all(np.equal(np.mod(p, 1), 0)):
                raise SpmmgnnError("a part vector must hold integer block-row ids")
        p = p.astype(np.int64, copy=False)
        if p.size and (p.min() < 0 or p.max() >= k):
            raise SpmmgnnError(
                f"part vector values must lie in [0, {k}) for {k} block rows; found "
                f"range [{p.min()}, {p.max()}]")
        perm = np.argsort(p, kind="stable").astype(np.int64)
        offsets = np.zeros(k + 1, dtype=np.int64)
        np.cumsum(np.bincount(p, minlength=k), out=offsets[1:])
        return cls(parts=p, k=k, perm=perm, offsets=offsets, method=method)

    @classmethod
    def from_sizes(cls, sizes, n: int | None = None) -> Partition:
        """Contiguous blocks of the given sizes (no relabelling)."""
        s = np.asarray(sizes)
        if s.ndim != 1 or s.size == 0 or (s.size and not np.issubdtype(s.dtype, np.integer)):
            raise SpmmgnnError("block sizes must be a non-empty 1-D list of integers")
        if np.any(s < 0):
            raise SpmmgnnError(f"block sizes must be non-negative, got {s.tolist()}")
        total = sum(int(v) for v in s)  # Python integers: uint64 sizes must not wrap
        if total > np.iinfo(np.int64).max:
            raise SpmmgnnError(f"block sizes sum to {total}, more than any matrix holds")
        if n is not None and total != n:
            raise SpmmgnnError(f"block sizes sum to {total} but the matrix has {n} rows")
        offsets = np.zeros(s.size + 1, dtype=np.int64)
        np.cumsum(s.astype(np.int64), out=offsets[1:])
        return cls(None, s.size, None, offsets, method="sizes")

    @classmethod
    def contiguous(cls, n: int, k: int) -> Partition:
        """Near-equal contiguous blocks: the first ``n % k`` blocks get one row more."""
        base, extra = divmod(n, k)
        sizes = np.full(k, base, dtype=np.int64)
        sizes[:extra] += 1
        p = cls.from_sizes(sizes, n)
        p.method = "contiguous"
        return p


def _integers(values, what: str) -> np.ndarray:
    a = np.asarray(values)
    if a.ndim != 1 or (a.size and a.dtype.kind not in "iu"):
        raise SpmmgnnError(f"a Partition's {what} must be a 1-D integer array, got "
                           f"{a.dtype} of shape {a.shape}")
    return a.astype(np.int64, copy=False)


def _checked_offsets(k, offsets) -> tuple[int, np.ndarray]:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise SpmmgnnError(f"a Partition's k must be a positive integer, got {k!r}")
    off = _integers(offsets, "offsets")
    if off.size != int(k) + 1 or off[0] != 0 or np.any(np.diff(off) < 0):
        raise SpmmgnnError(f"a Partition's offsets must be k + 1 = {int(k) + 1} "
                           "non-decreasing integers from 0")
    return int(k), off


def _checked_perm(perm, n: int) -> np.ndarray:
    """``perm`` if it is a permutation of 0..n-1 (O(n)), else the error naming why."""
    p = _integers(perm, "perm")
    if p.size != n:
        raise SpmmgnnError(f"a Partition's perm has {p.size} entries for n = {n} vertices")
    if n and (p.min() < 0 or p.max() >= n):
        raise SpmmgnnError(f"a Partition's perm must hold the ids 0..{n - 1}, found range "
                           f"[{p.min()}, {p.max()}]")
    if n and np.bincount(p, minlength=n).max() > 1:
        raise SpmmgnnError("a Partition's perm is not a permutation: some ids appear twice")
    return p


def _checked_parts(parts, perm: np.ndarray | None, offsets: np.ndarray) -> np.ndarray:
    """``parts`` if it agrees with the blocks (``parts[perm]`` is block row b on
    ``offsets[b]:offsets[b+1]``)."""
    p = _integers(parts, "parts")
    blocks = np.repeat(np.arange(offsets.size - 1, dtype=np.int64), np.diff(offsets))
    if p.size != blocks.size or not np.array_equal(p if perm is None else p[perm], blocks):
        raise SpmmgnnError("a Partition's parts do not match its perm and offsets (parts[perm]"
                           " must be block row b on offsets[b]:offsets[b+1]); build one with "
                           "Partition.from_parts or Partition.from_sizes")
    return p


def resolve_partition(spec, n: int, k: int, what: str = "partition") -> Partition:
    """Turn the user's ``partition=`` argument into a Partition of n vertices into k blocks.

    ``None`` -> near-equal contiguous blocks; a Partition -> checked as is; a sequence of
    length k -> block sizes; of length n -> a part vector. When n == k both readings fit,
    so we ask for an explicit ``Partition`` instead of guessing.
    """
    if spec is None:
        return Partition.contiguous(n, k)
    if isinstance(spec, Partition):
        if spec.n != n or spec.k != k:
            raise SpmmgnnError(
                f"{what} is for n={spec.n} vertices in k={spec.k} blocks, but the matrix "
                f"has n={n} rows and the grid has {k} block rows")
        return spec
    arr = np.asarray(spec)
    if arr.ndim != 1:
        raise SpmmgnnError(f"{what} must be 1-D (block sizes or a part vector), got {arr.shape}")
    if arr.size == k and arr.size != n:
        return Partition.from_sizes(arr, n)
    if arr.size == n and arr.size != k:
        return Partition.from_parts(arr, k)
    if arr.size == n == k:
        raise SpmmgnnError(
            f"{what} of length {n} is ambiguous when n == number of block rows; pass "
            "spmmgnn.Partition.from_sizes(...) or spmmgnn.Partition.from_parts(..., k)")
    raise SpmmgnnError(
        f"{what} has length {arr.size}: expected {k} block sizes (one per block row) or a "
        f"part vector of length n={n}")


def bcast_partition(comm, part: Partition | None, root: int = 0) -> Partition | None:
    """Collective: root's partition (or None) on every rank, sent as its offsets and, when it
    has one, its permutation (``wire``: buffers, no pickle). Root keeps its own object; the
    others get the blocks and the order, without root's ``metrics`` and ``candidates``."""
    from .runtime.wire import bcast_array, bcast_json

    if comm.Get_size() == 1:
        return part
    mine = comm.Get_rank() == root
    head = bcast_json(comm, None if not mine or part is None else dict(
        k=part.k, method=part.method, seconds=float(part.seconds),
        perm=part._perm is not None), root)
    if head is None:
        return part
    offsets = bcast_array(comm, part.offsets if mine and part else None, root)
    perm = (bcast_array(comm, part._perm if mine and part else None, root) if head["perm"]
            else None)
    if mine:
        return part
    parts = None
    if perm is not None:
        parts = np.empty_like(perm)
        parts[perm] = np.repeat(np.arange(head["k"], dtype=np.int64), np.diff(offsets))
    return Partition(parts, head["k"], perm, offsets, None, head["method"], head["seconds"])
