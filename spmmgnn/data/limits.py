"""The size guard every reader applies before allocating anything of a declared size.

A file may declare at most ``FREE_VERTICES + VERTICES_PER_BYTE * bytes`` vertices and never
more than ``MAX_VERTICES``, where ``bytes`` is the data it holds once decompressed (bounded by
``MAX_INFLATION`` times the file size for ``.gz``/``.bz2``/``.xz``). A header claiming 10**12
vertices in a small file is refused at once, before memory of that size is touched.

Every file a tool reads is a regular file (``check_input_file``: a device such as
``/dev/zero`` or a FIFO has no size to bound), and what it will hold in memory is checked
against the node's available memory first (``machine.check_memory``). ``.npz`` files
(graphs, checkpoints) go through ``read_npz``, which checks each member's declared shape
against the bytes it holds before reading it.
"""

from __future__ import annotations

import os
import stat
import zipfile
import zlib
from pathlib import Path

import numpy as np

from ..runtime.errors import SpmmgnnError
from ..runtime.machine import check_memory, format_bytes_apart

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


def check_input_file(path, what: str = "file", inflation: float = 1.0) -> int:
    """The size of ``path`` after checking it is a regular file (symbolic links followed)
    and that ``inflation`` times its size fits in this node's memory; SpmmgnnError else."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise SpmmgnnError(f"{what} {path} does not exist") from None
    except OSError as exc:
        raise SpmmgnnError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise SpmmgnnError(f"cannot read {what} {path}: not a regular file (a device, FIFO or "
                           "directory has no size to check before reading)")
    check_memory(inflation * st.st_size, f"reading {what} {path}")
    return int(st.st_size)


class NpzError(SpmmgnnError):
    """A ``.npz`` file that is not one (the caller names the file and what it should be)."""


NPZ_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError,
              zlib.error, NotImplementedError, KeyError, OverflowError, MemoryError)


def _declared(zf: zipfile.ZipFile, info: zipfile.ZipInfo, size: int) -> int:
    """Bytes member ``info`` declares in its ``.npy`` header, after checking them against
    what the member holds (and the member against the file)."""
    if info.compress_size > size or info.file_size > MAX_INFLATION * info.compress_size + 1024:
        raise NpzError(f"member {info.filename} declares an impossible size")
    with zf.open(info) as fh:
        version = np.lib.format.read_magic(fh)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(fh)
        elif version == (2, 0):
            shape, _, dtype = np.lib.format.read_array_header_2_0(fh)
        else:
            raise NpzError(f"member {info.filename}: unsupported .npy version {version}")
    nbytes = int(np.prod(shape, dtype=np.float64)) * dtype.itemsize
    if dtype.hasobject or nbytes > info.file_size:
        raise NpzError(f"member {info.filename}: header does not match its data")
    return nbytes


def read_npz(path, what: str = "file", names: tuple[str, ...] | None = None,
             max_bytes: int | None = None, unbounded: tuple[str, ...] = ()
             ) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` (no pickle; only ``names`` if given), each member's declared
    shape checked against its bytes and their total against the node's memory before any is
    read. ``max_bytes``: what the members (but ``unbounded``) may declare in all, when the
    caller knows what it expects. NpzError for anything malformed; SpmmgnnError if the arrays
    do not fit in memory or in ``max_bytes``."""
    size = check_input_file(path, what, inflation=0)
    try:
        with zipfile.ZipFile(path) as zf:
            infos = [i for i in zf.infolist()
                     if names is None or i.filename.removesuffix(".npy") in names]
            declared = {i.filename.removesuffix(".npy"): _declared(zf, i, size) for i in infos}
            bounded = sum(v for k, v in declared.items() if k not in unbounded)
            if max_bytes is not None and bounded > max_bytes:
                declared, most = format_bytes_apart(bounded, max_bytes)
                raise SpmmgnnError(f"{what} {path} declares {declared} of arrays "
                                   f"where at most {most} are expected")
            check_memory(sum(declared.values()), f"reading {what} {path}")
            out = {}
            for info in infos:
                with zf.open(info) as fh:
                    out[info.filename.removesuffix(".npy")] = np.lib.format.read_array(
                        fh, allow_pickle=False)
            return out
    except SpmmgnnError:
        raise
    except NPZ_ERRORS as exc:
        raise NpzError(f"{type(exc).__name__}: {exc}") from None
