"""One pool of reusable work buffers: the per-epoch path asks for the same shapes every call,
so each (name, shape, dtype, slot) is allocated once and then handed out again."""

from __future__ import annotations

import numpy as np


class BufferPool:
    """Scratch arrays keyed by (name, shape, dtype, slot). ``slot`` separates buffers that
    are in use at the same time (e.g. several exchanges in flight); the contents of a buffer
    are whatever its last user left (``np.empty`` semantics)."""

    def __init__(self):
        self._arrays: dict[tuple, np.ndarray] = {}

    def get(self, name: str, shape: tuple[int, ...], dtype, slot=0) -> np.ndarray:
        buf = self._arrays.get((name, shape, dtype, slot))  # hit: no key to normalize
        if buf is None:
            key = (name, tuple(int(s) for s in shape), np.dtype(dtype), slot)
            buf = self._arrays.get(key)
            if buf is None:
                buf = self._arrays[key] = np.empty(key[1], dtype=key[2])
        return buf

    def nbytes(self) -> int:
        """Bytes held by the pool (what its buffers add to a rank's memory)."""
        return sum(a.nbytes for a in self._arrays.values())
