"""The host <-> device leg of one SpMM call on a device grid (``ProcessGrid(device=...)``),
per rank, predicted from the partition alone: exactly what ``comm_stats()`` counts as the
``device_host`` tier (``bytes_sent_by_tier``: device to host; ``bytes_received_by_tier``:
host to device) when the grid's transport is MPI (``exchange.transport.MpiLink`` staging
the rows of a torch backend, ``Backend.wire_out`` / ``wire_in``), and the copies that move
them (the alpha term of ``tiers.device_host_seconds``). With ``transport="torch"`` (NCCL,
Gloo) or a CUDA-aware MPI nothing is staged: the leg is 0.

The families modelled (``device_leg_modelled``): the 1D and 1.5D ones. Per call, on MPI:

* sparse1d / sparse15d / prepost1d: the rows it sends, device to host before the
  ``Ialltoallv``, and the rows it receives, host to device after (the transpose: its partial
  sums out, the owners' sums in); with a codec, its packed bytes (every codec encodes and
  decodes on the device);
* oblivious1d / oblivious15d: a stage's owner stages its block row once, however many ranks
  it goes to, and every other rank copies each stage's block in; the transpose stages every
  stage's partial sums out and the owner's reduced sums in (nothing with one block row: a
  link over one rank stages nothing);
* 1.5D (c > 1): the replicas' all-reduce of the result, out and back in.

The 2D and 3D families, plexus3d and featureparallel run on a device grid too, but their
leg is not modelled: ``device_host_volumes`` says so with None.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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


MODELLED = ("sparse1d", "sparse15d", "prepost1d", *OBLIVIOUS)


def device_leg_modelled(algorithm: str) -> bool:
    """Whether this model projects ``algorithm`` onto GPUs (its host <-> device leg here,
    its device memory in ``device_memory``): the 1D and 1.5D families. Every family runs
    on a device grid; the others are not projected."""
    return algorithm in MODELLED


def _nonzero(*arrays) -> np.ndarray:
    return sum((np.asarray(a) > 0).astype(np.int64) for a in arrays)


def device_host_volumes(algorithm: str, layout: Layout, vol: Volumes, P: int, c: int, f: int,
                        itemsize: int = 4, codec: str | None = None,
                        transport: str = "mpi") -> DeviceHost | None:
    """The leg of ``algorithm`` whose rank-to-rank volumes are ``vol`` (``volumes.predict``
    with the same arguments; a codec acts through ``vol`` alone, since every codec's packed
    rows are what is staged) on a grid whose ``transport`` is "mpi" (staged) or "torch"
    (nothing staged: zeros). None where the leg is not modelled (``device_leg_modelled``)."""
    if not device_leg_modelled(algorithm):
        return None
    if transport == "torch":
        zero = np.zeros(P, dtype=np.int64)
        return DeviceHost(zero, zero, zero, zero, zero, zero)
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
