"""One pool of reusable work buffers: the per-epoch path asks for the same shapes every call,
so each (name, shape, dtype, slot) is allocated once and then handed out again; and a
recycler for the large arrays a training step allocates anew each step."""

from __future__ import annotations

import math
import sys

import numpy as np


class BufferPool:
    """Scratch arrays keyed by (name, shape, dtype, slot). ``slot`` separates buffers that
    are in use at the same time (e.g. several exchanges in flight); the contents of a buffer
    are whatever its last user left (``np.empty`` semantics)."""

    def __init__(self):
        self._arrays: dict[tuple, np.ndarray] = {}
        self._ids: set[int] = set()  # id() of every array handed out (kept for good)

    def get(self, name: str, shape: tuple[int, ...], dtype, slot=0) -> np.ndarray:
        buf = self._arrays.get((name, shape, dtype, slot))  # hit: no key to normalize
        if buf is None:
            key = (name, tuple(int(s) for s in shape), np.dtype(dtype), slot)
            buf = self._arrays.get(key)
            if buf is None:
                buf = self._arrays[key] = np.empty(key[1], dtype=key[2])
                self._ids.add(id(buf))
        return buf

    def owns(self, array: np.ndarray) -> bool:
        """Whether ``array`` is one of this pool's buffers (itself, not a view): it lives
        as long as the pool, so a persistent request may hold it."""
        return id(array) in self._ids

    def nbytes(self) -> int:
        """Bytes held by the pool (what its buffers add to a rank's memory)."""
        return sum(a.nbytes for a in self._arrays.values())


RECYCLE_MIN_BYTES = 1 << 22  # smaller arrays: malloc's own free lists reuse them, no faults
RECYCLE_KEEP = 6  # arrays kept per (shape, dtype): the most a training step has alive at once


class Recycler:
    """``np.empty`` for the large arrays an epoch allocates again each step (SpMM outputs,
    activations, their gradients): an array is handed out again once nothing else
    references it (no tensor, view or pending request: its reference count says so), so the
    step reuses memory instead of mapping fresh pages from the kernel (glibc maps arrays
    above 32 MiB anew per allocation; faulting them in costs about 9 ms per 46 MB, measured,
    which is a pass over the array). Arrays below ``RECYCLE_MIN_BYTES`` are not kept."""

    def __init__(self, keep: int = RECYCLE_KEEP):
        self.keep = keep
        self._held: dict[tuple, list[np.ndarray]] = {}

    def empty(self, shape: tuple[int, ...], dtype) -> np.ndarray:
        dtype = np.dtype(dtype)
        if math.prod(shape) * dtype.itemsize < RECYCLE_MIN_BYTES:  # (np.prod: ~5 us a call)
            return np.empty(shape, dtype=dtype)
        shape = tuple(int(s) for s in shape)
        held = self._held.setdefault((shape, dtype), [])
        for a in held:
            # the list's reference, the loop variable's and getrefcount's own argument
            if sys.getrefcount(a) == 3:
                return a
        a = np.empty(shape, dtype=dtype)
        if len(held) < self.keep:
            held.append(a)
        return a

    def nbytes(self) -> int:
        """Bytes the recycler keeps (in use or free)."""
        return sum(a.nbytes for arrays in self._held.values() for a in arrays)

    def clear(self) -> None:
        """Forget every kept array (those still in use live on with their users)."""
        self._held.clear()


RECYCLER = Recycler()


def recycled_empty(shape: tuple[int, ...], dtype) -> np.ndarray:
    """An uninitialized array from the process's ``Recycler`` (contents: whatever its last
    user left)."""
    return RECYCLER.empty(shape, dtype)
