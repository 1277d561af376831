"""The host <-> device leg of one SpMM call on a device grid (``ProcessGrid(device=...)``),
per rank, predicted from the partition alone: exactly what ``comm_stats()`` counts as the
``device_host`` tier (``bytes_sent_by_tier``: device to host; ``bytes_received_by_tier``:
host to device) for the algorithms of ``algorithms/on_device.py``, and the copies that move
them (the alpha term of ``tiers.device_host_seconds``).

What the device path stages (``algorithms/device_products.py``), per call:

* sparse1d / sparse15d / prepost1d: the rows it sends, device to host before the
  ``Ialltoallv``, and the rows it receives, host to device after (the transpose: its partial
  sums out, the owners' sums in); with a codec, its packed bytes (every codec encodes and
  decodes on the device);
* oblivious1d / oblivious15d: a stage's owner stages its block row once, however many ranks
  it goes to, and every other rank copies each stage's block in; the transpose stages every
  stage's partial sums out and the owner's reduced sums in (nothing with one block row);
* 1.5D (c > 1): the replicas' all-reduce of the result, out and back in.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..algorithms import ALGORITHMS
from .volumes import Layout, Volumes, stage_mask

OBLIVIOUS = ("oblivious1d", "oblivious15d")


@dataclass
class DeviceHost:
    """Per-rank bytes and copies of the host <-> device leg of one ``matmul`` (and, ``_t``,
    one ``matmul_t``): ``to_host`` device -> host, ``to_device`` host -> device."""

    to_host: np.ndarray
    to_device: np.ndarray
    to_host_t: np.ndarray
    to_device_t: np.ndarray
    copies: np.ndarray
    copies_t: np.ndarray

    @property
    def total(self) -> np.ndarray:
        """Bytes a forward call moves across the link, both directions."""
        return self.to_host + self.to_device


def runs_on_device(algorithm: str) -> bool:
    cls = ALGORITHMS.get(algorithm)
    return cls is not None and cls.runs_on_device


def _nonzero(*arrays) -> np.ndarray:
    return sum((np.asarray(a) > 0).astype(np.int64) for a in arrays)


def device_host_volumes(algorithm: str, layout: Layout, vol: Volumes, P: int, c: int, f: int,
                        itemsize: int = 4, codec: str | None = None) -> DeviceHost | None:
    """The leg of ``algorithm`` (None: it does not run on a device grid) whose rank-to-rank
    volumes are ``vol`` (``volumes.predict`` with the same arguments; a codec acts through
    ``vol`` alone, since every codec's packed rows are what is staged)."""
    if not runs_on_device(algorithm):
        return None
    allreduce = np.asarray(vol.allreduce, dtype=np.int64)
    if algorithm in OBLIVIOUS:
        to_host, to_device, to_host_t, to_device_t, copies, copies_t = _oblivious(
            layout, P, c, f, itemsize)
    else:  # a halo exchange: each packed row sent staged out once, each received in once
        to_host, to_device = vol.sent, vol.received
        to_host_t, to_device_t = vol.sent_t, vol.received_t
        copies, copies_t = _nonzero(to_host, to_device), _nonzero(to_host_t, to_device_t)
    extra = 2 * _nonzero(allreduce)
    return DeviceHost(to_host + allreduce, to_device + allreduce, to_host_t + allreduce,
                      to_device_t + allreduce, copies + extra, copies_t + extra)


def _oblivious(layout: Layout, P: int, c: int, f: int, itemsize: int):
    """The stage loop's copies: rank (i, j) multiplies the stages ``M[j]`` of its replica."""
    k = P // c
    i, j = np.divmod(np.arange(P), c)
    M = stage_mask(k, c)
    block = layout.sizes.astype(np.int64) * f * itemsize   # bytes of block row q
    if k == 1:  # one block row: no stage leaves the rank
        zero = np.zeros(P, dtype=np.int64)
        return zero, zero, zero, zero, zero, zero
    mine = M[j, i]
    own = np.where(mine, block[i], 0)
    staged = (M[j] * block[None, :]).sum(axis=1)            # every stage's block, once
    others = staged - own
    nonempty = M[j] & (block[None, :] > 0)
    other_stages = nonempty.sum(axis=1) - (mine & (block[i] > 0))
    return (own, others, staged, own, _nonzero(own) + other_stages,
            nonempty.sum(axis=1) + _nonzero(own))
