"""Collectives of metadata and arrays without pickle: mpi4py's lowercase ``bcast`` /
``gather`` / ``allgather`` pickle their objects, and the project rule is "no pickle for
data" (an unpickled message can run code, and a pickled array is copied twice).

Metadata (numbers, strings, lists, dicts) travels as UTF-8 JSON: its length first, then the
bytes, both as buffers. An array travels as a JSON header (dtype, shape) and then its own
buffer (``Bcast``), so the bytes are sent once and never interpreted as code.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from mpi4py import MPI


def _plain(value):
    """JSON for numpy scalars and arrays (their Python values)."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not metadata (JSON) and is not sent")


def encode(obj: Any) -> np.ndarray:
    """``obj`` as UTF-8 JSON bytes (a uint8 array)."""
    return np.frombuffer(json.dumps(obj, default=_plain).encode(), dtype=np.uint8)


def decode(data: np.ndarray) -> Any:
    return json.loads(data.tobytes().decode())


def bcast_json(comm: MPI.Comm, obj: Any, root: int = 0) -> Any:
    """Collective: root's ``obj`` (JSON-able) on every rank. Tuples arrive as lists; root
    gets its own object back."""
    if comm.Get_size() == 1:
        return obj
    mine = comm.Get_rank() == root
    data = encode(obj) if mine else None
    size = np.array([0 if data is None else data.size], dtype=np.int64)
    comm.Bcast(size, root=root)
    buf = data if mine else np.empty(int(size[0]), dtype=np.uint8)
    comm.Bcast(buf, root=root)
    return obj if mine else decode(buf)


def _gathered(comm: MPI.Comm, obj: Any, root: int | None) -> list | None:
    data = encode(obj)
    sizes = np.zeros(comm.Get_size(), dtype=np.int64)
    mine = np.array([data.size], dtype=np.int64)
    if root is None:
        comm.Allgather(mine, sizes)
    else:
        comm.Gather(mine, sizes, root=root)
    if root is not None and comm.Get_rank() != root:
        comm.Gatherv(data, None, root=root)
        return None
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    buf = np.empty(int(offsets[-1]), dtype=np.uint8)
    spec = [buf, (sizes, offsets[:-1]), MPI.BYTE]
    if root is None:
        comm.Allgatherv(data, spec)
    else:
        comm.Gatherv(data, spec, root=root)
    return [decode(buf[offsets[r]:offsets[r + 1]]) for r in range(comm.Get_size())]


def allgather_json(comm: MPI.Comm, obj: Any) -> list:
    """Collective: every rank's ``obj`` (JSON-able), in rank order, on every rank."""
    return _gathered(comm, obj, None)


def gather_json(comm: MPI.Comm, obj: Any, root: int = 0) -> list | None:
    """Collective: every rank's ``obj`` in rank order on root; None elsewhere."""
    return _gathered(comm, obj, root)


def bcast_array(comm: MPI.Comm, array: np.ndarray | None, root: int = 0) -> np.ndarray:
    """Collective: root's numeric ``array`` on every rank (a header, then its buffer)."""
    if comm.Get_size() == 1:
        return array
    mine = comm.Get_rank() == root
    if mine:
        array = np.require(array, requirements="C")  # a 0-d array stays 0-d
        if array.dtype.hasobject:
            raise TypeError("an object array is not numbers and is not sent")
    dtype, shape = bcast_json(comm, [array.dtype.str, list(array.shape)] if mine else None,
                              root)
    out = array if mine else np.empty(tuple(shape), dtype=np.dtype(dtype))
    if out.size:
        comm.Bcast(out.reshape(-1).view(np.uint8), root=root)
    return out
