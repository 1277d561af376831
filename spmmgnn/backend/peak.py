"""The peak of the tensor memory a piece of torch code allocates, on any device.

``torch.cuda.max_memory_allocated`` exists on CUDA only; ``PeakTracker`` gives its
counterpart on ``device="cpu"`` (and any other device): a ``TorchDispatchMode`` that sees
every operation's outputs, counts each new storage's bytes once while it lives (a weak
reference to the storage says when it is freed) and keeps the highest total. So CI checks
the device-memory model (``training.device_peak``) against what the very same code allocates.

What it sees: every storage an operation returns (a view or an in-place result aliases its
input, so it adds nothing). What it does not see: storages made before the ``with`` block
(the caller counts those), memory an operation allocates and frees inside itself (on CUDA:
cuSPARSE's workspace), and memory that does not come from torch (numpy arrays wrapped by
``torch.from_numpy``).
"""

from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


def storage_parts(t: torch.Tensor) -> list[torch.UntypedStorage]:
    """The storages holding ``t``'s data (a sparse CSR tensor: its three arrays)."""
    if t.layout == torch.sparse_csr:
        return [u.untyped_storage() for u in (t.crow_indices(), t.col_indices(), t.values())]
    if t.layout != torch.strided:
        return []
    return [t.untyped_storage()]


def tensor_bytes(*tensors: torch.Tensor) -> int:
    """Bytes of the distinct storages behind ``tensors`` (views of one storage count once)."""
    seen: dict[int, int] = {}
    for t in tensors:
        for s in storage_parts(t):
            seen[s.data_ptr()] = s.nbytes()
    return sum(seen.values())


class PeakTracker(TorchDispatchMode):
    """``with PeakTracker() as t: ...``, then ``t.peak``: the most bytes the storages created
    inside the block held at one time (``t.live``: those still alive; ``t.allocated``: all
    of them added up). ``record=True``: ``t.timeline`` lists (operation, live bytes after it)
    in order, to see where the peak is."""

    def __init__(self, record: bool = False):
        super().__init__()
        self.live = self.peak = self.allocated = 0
        self.timeline: list[tuple[str, int]] | None = [] if record else None
        self._tracked: dict[int, weakref.finalize] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.timeline is not None:
            self.timeline.append((f"before {func}", self.live))
        out = func(*args, **(kwargs or {}))
        returns = func._schema.returns
        aliased = any(r.alias_info is not None for r in returns)
        if not aliased:
            for t in tree_leaves(out):
                if isinstance(t, torch.Tensor):
                    self._track(t)
        if self.timeline is not None:
            self.timeline.append((str(func), self.live))
        return out

    def _track(self, t: torch.Tensor) -> None:
        for s in storage_parts(t):
            key = id(s)
            if key in self._tracked and self._tracked[key].alive:
                continue
            size = s.nbytes()
            self.live += size
            self.allocated += size
            self.peak = max(self.peak, self.live)
            self._tracked[key] = weakref.finalize(s, self._freed, key, size)

    def _freed(self, key: int, size: int) -> None:
        self.live -= size
        self._tracked.pop(key, None)
