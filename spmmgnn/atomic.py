"""Atomic file writes: write to a temporary file beside the target, fsync, then rename.

The result has the permissions a plain ``open(target, "w")`` would give: an existing target's
mode, else ``0o666`` less the umask (``mkstemp`` alone would leave ``0o600``).
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import SpmmgnnError


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _mode_for(target: Path) -> int:
    try:
        return stat.S_IMODE(target.stat().st_mode)
    except OSError:
        return 0o666 & ~_umask()


def _temp_beside(target: Path) -> Path:
    """A new empty file ``.NAME.XXXX.tmp`` in the target's folder (the pattern
    ``_remove_stale`` looks for)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    return Path(tmp)


def _remove_stale(target: Path) -> None:
    """Temporary files of earlier writes of ``target`` that a killed process left behind."""
    for old in target.parent.glob(f".{target.name}.*.tmp"):
        try:
            old.unlink()
        except OSError:
            pass


@contextmanager
def atomic_path(target: str | os.PathLike, remove_stale: bool = False) -> Iterator[Path]:
    """Yield a temporary path in the target's directory; on success it replaces ``target``.

    On any exception the temporary file is removed and an existing ``target`` is untouched.
    ``remove_stale``: first delete temporary files of earlier writes of the same target
    (only for targets a single process writes, such as a run's checkpoint).
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    if remove_stale:
        _remove_stale(target)
    tmp_path = _temp_beside(target)
    try:
        yield tmp_path
        with open(tmp_path, "rb+") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp_path, _mode_for(target))
        os.replace(tmp_path, target)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def write_text_atomic(target: str | os.PathLike, text: str) -> None:
    with atomic_path(target) as tmp:
        tmp.write_text(text)


def check_writable(target: str | os.PathLike, what: str = "output") -> None:
    """SpmmgnnError now, before any work, if ``target`` could not be written later: its
    folder cannot be created or written, or the target is a folder."""
    target = Path(target)
    if target.is_dir():
        raise SpmmgnnError(f"cannot write {what} {target}: it is a directory")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        _temp_beside(target).unlink()
    except OSError as exc:
        raise SpmmgnnError(f"cannot write {what} {target}: {exc.strerror or exc}") from None
