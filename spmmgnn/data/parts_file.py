"""A part vector made outside this library (dKaMinPar, ParMETIS, XtraPuLP, METIS's
``gpmetis``): ``read_part_vector(path, n, k)`` reads and checks it for ``partition
--from-parts`` and ``write_partitioned(..., part_vector=...)``.

Two formats: ``.npy`` (an integer array, or floats holding integers; read without pickle)
and text, one part id per line in vertex order (what ``gpmetis`` and dKaMinPar write;
blank lines and ``#`` or ``%`` comment lines are skipped). Every problem is one
SpmmgnnError naming the file: a wrong length, a value ``>= k`` or negative, a non-integer,
NaN or Inf.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..runtime.errors import SpmmgnnError
from .limits import check_input_file

# a text line holds at most this many bytes per vertex when parsed (float64 and the tokens)
TEXT_INFLATION = 24.0


def _read_text(path: Path) -> np.ndarray:
    """One number per line (numpy's C parser, no Python object per vertex)."""
    try:
        p = np.loadtxt(path, dtype=np.float64, comments=("#", "%"), ndmin=1)
    except ValueError as exc:
        why = str(exc).splitlines()[0].rstrip(".")
        raise SpmmgnnError(f"part vector {path}: not one integer part id per line ({why})") \
            from None
    except OSError as exc:
        raise SpmmgnnError(f"cannot read part vector {path}: {exc.strerror or exc}") from None
    if p.ndim != 1:
        raise SpmmgnnError(f"part vector {path}: expected one part id per line, found "
                           f"{p.shape[1]} columns")
    return p


def _read_npy(path: Path) -> np.ndarray:
    try:
        p = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise SpmmgnnError(f"part vector {path} is not a readable .npy array: {exc}") from None
    if not isinstance(p, np.ndarray) or not (np.issubdtype(p.dtype, np.integer)
                                             or np.issubdtype(p.dtype, np.floating)):
        raise SpmmgnnError(f"part vector {path}: expected an integer array, got "
                           f"{getattr(p, 'dtype', type(p))}")
    return p


def read_part_vector(path, n: int, k: int) -> np.ndarray:
    """The part vector in ``path`` (``.npy`` or text) as int64, checked against a graph of
    ``n`` vertices and ``k`` parts; one SpmmgnnError for each kind of problem."""
    path = Path(path)
    check_input_file(path, "part vector", TEXT_INFLATION)
    p = _read_npy(path) if path.suffix.lower() == ".npy" else _read_text(path)
    if p.ndim != 1 and not (p.ndim == 2 and 1 in p.shape):
        raise SpmmgnnError(f"part vector {path}: expected a vector, got shape {p.shape}")
    p = p.reshape(-1)
    if p.size != n:
        raise SpmmgnnError(f"part vector {path} has {p.size:,} entries but the graph has "
                           f"{n:,} vertices")
    if np.issubdtype(p.dtype, np.floating):
        bad = ~np.isfinite(p)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise SpmmgnnError(f"part vector {path}: entry {i} is {p[i]} (NaN or Inf), not a "
                               "part id")
        frac = p != np.floor(p)
        if frac.any():
            i = int(np.flatnonzero(frac)[0])
            raise SpmmgnnError(f"part vector {path}: entry {i} is {p[i]}, not an integer "
                               "part id")
    out_of_range = (p < 0) | (p >= k)
    if out_of_range.any():
        i = int(np.flatnonzero(out_of_range)[0])
        raise SpmmgnnError(f"part vector {path}: entry {i} is {int(p[i])}, outside [0, {k}) "
                           f"for k = {k} parts")
    return p.astype(np.int64)
