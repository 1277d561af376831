"""The size guard every reader applies before allocating anything of a declared size.

A file may declare at most ``FREE_VERTICES + VERTICES_PER_BYTE * bytes`` vertices and never
more than ``MAX_VERTICES``, where ``bytes`` is the data it holds once decompressed (bounded by
``MAX_INFLATION`` times the file size for ``.gz``/``.bz2``/``.xz``). A header claiming 10**12
vertices in a small file is refused at once, before memory of that size is touched.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import SpmmgnnError

MAX_VERTICES = 2**31 - 1      # vertex ids fit int32
FREE_VERTICES = 2**20         # always allowed, whatever the file size
VERTICES_PER_BYTE = 8         # beyond that, vertices per byte of (uncompressed) file
MAX_INFLATION = 1100          # deflate expands at most ~1032x
COMPRESSED_SUFFIXES = {".gz", ".bz2", ".xz"}


def data_bytes(path) -> int:
    """An upper bound on the bytes of data the file holds once decompressed."""
    p = Path(path)
    size = p.stat().st_size
    return size * MAX_INFLATION if p.suffix.lower() in COMPRESSED_SUFFIXES else size


def vertex_limit(nbytes: int) -> int:
    """The largest vertex count a file holding ``nbytes`` bytes of data may declare."""
    return min(MAX_VERTICES, FREE_VERTICES + VERTICES_PER_BYTE * int(nbytes))


def check_vertices(path, n: int, nbytes: int) -> int:
    """``n`` if a file of ``nbytes`` bytes can justify that many vertices, else SpmmgnnError."""
    limit = vertex_limit(nbytes)
    if not 0 <= n <= limit:
        raise SpmmgnnError(f"cannot read graph {path}: {n} vertices is out of range for a "
                           f"file of {nbytes} bytes (allowed 0..{limit})")
    return int(n)
