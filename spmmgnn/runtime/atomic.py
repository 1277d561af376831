"""Atomic file writes: write to a temporary file, fsync, then rename over the target.

What a target may be (docs/failures.md, "Output files"):

- a regular file or a new name: written through a temporary file
  ``.NAME.PID@HOST.XXXXXXXX.spmmgnn-partial.tmp`` beside it that replaces it only once
  complete, so a crash, a full disk or a signal leaves the old file as it was and no
  temporary behind;
- a symbolic link: followed; the file it names is replaced, the link kept;
- a character device or a FIFO (``/dev/null``, ``/dev/stdout``, a pipe): written in place
  once complete (the temporary lives in the system's temporary folder), since turning it into
  a regular file is never what was meant; ``/dev/full`` then fails like a full disk, and a
  FIFO that no process reads is an error, not a hang;
- a directory, a block device or a socket: refused.

Temporaries that an earlier write of the same target left behind when its process was killed
(same host, process gone) are removed first: only names of that exact form, which no other
program makes (the ``spmmgnn-partial`` marker); a user's ``.NAME.backup.tmp`` is never
touched. Every failure is one ``SpmmgnnError`` naming the target. The result has the
permissions a plain ``open(target, "w")`` would give: an existing target's mode, else
``0o666`` less the umask (``mkstemp`` alone would leave ``0o600``).
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import socket
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from . import signals
from .errors import SpmmgnnError

IN_PLACE = (stat.S_ISCHR, stat.S_ISFIFO)  # written in place (see the module docstring)
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISFIFO, "a FIFO"))


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _mode_for(target: Path) -> int:
    try:
        return stat.S_IMODE(target.stat().st_mode)
    except OSError:
        return default_mode()


def _host() -> str:
    return socket.gethostname().replace("/", "_") or "localhost"


# the fixed end of our temporaries' names: what tells them from files spmmgnn did not make
MARKER = ".spmmgnn-partial.tmp"


def _temp_in(folder: Path, name: str) -> Path:
    """A new empty file ``.NAME.PID@HOST.XXXXXXXX.spmmgnn-partial.tmp`` in ``folder`` (the
    form ``_remove_stale`` matches; ``XXXXXXXX``: ``mkstemp``'s random token)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.{os.getpid()}@{_host()}.", suffix=MARKER,
                               dir=folder)
    os.close(fd)
    return Path(tmp)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: a process of another user
        return True
    return True


def _remove_stale(target: Path) -> list[Path]:
    """Temporaries of earlier writes of ``target`` whose process is gone: named exactly as
    ``_temp_in`` names them, by this host, with a pid that no longer runs. Any other file,
    whatever its name, is left alone: spmmgnn never deletes a file it did not create."""
    prefix = f".{target.name}."
    ours = re.compile(rf"(\d+)@(.+)\.[a-z0-9_]{{8}}{re.escape(MARKER)}")
    host, removed = _host(), []
    for old in target.parent.glob(f"{glob_escape(prefix)}*{MARKER}"):
        found = ours.fullmatch(old.name[len(prefix):])
        if found and found.group(2) == host and not _alive(int(found.group(1))):
            try:
                old.unlink()
                removed.append(old)
            except OSError:
                pass
    return removed


def glob_escape(text: str) -> str:
    """``text`` with the glob metacharacters ``*?[`` matched literally."""
    return re.sub(r"([*?\[])", r"[\1]", text)


def resolve(target: str | os.PathLike, what: str = "output") -> tuple[Path, bool]:
    """(the path to write, written in place?): symbolic links followed (a dangling one to
    the file it names); SpmmgnnError for a directory, block device or socket."""
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        return Path(os.path.realpath(target)), False
    except OSError as exc:
        raise SpmmgnnError(f"cannot write {what} {target}: {exc.strerror or exc}") from None
    if stat.S_ISREG(mode):
        return Path(os.path.realpath(target)), False
    if any(test(mode) for test in IN_PLACE):
        return Path(target), True  # by the name given: /dev/stdout may name a pipe
    kind = next(name for test, name in _KINDS if test(mode))
    raise SpmmgnnError(f"cannot write {what} {target}: it is {kind}; give a file name")


def _write_in_place(tmp: Path, target: Path) -> None:
    """Copy the finished temporary into a device or FIFO."""
    with open(_open_in_place(target, os.O_WRONLY), "wb") as out, open(tmp, "rb") as src:
        shutil.copyfileobj(src, out, 1 << 20)


def _open_in_place(path: Path, flags: int) -> int:
    """A blocking descriptor of a device or FIFO, opened without blocking (a FIFO without
    a reader is ENXIO at once, not a hang)."""
    try:
        fd = os.open(path, flags | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise OSError(exc.errno, "no process reads this FIFO") from None
        raise
    os.set_blocking(fd, True)
    return fd


@contextmanager
def open_append(target: str | os.PathLike, what: str = "output") -> Iterator:
    """An unbuffered binary file object appending to ``target`` (created if missing;
    symbolic links followed; a device or FIFO written in place, see the module docstring).
    Failing to open it is one SpmmgnnError."""
    path, in_place = resolve(target, what)
    try:
        if in_place:  # unbuffered: a failed write fails there, not again at close
            fh = open(_open_in_place(path, os.O_WRONLY | os.O_APPEND), "wb", buffering=0)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            fh = open(path, "a+b", buffering=0)
    except OSError as exc:
        raise SpmmgnnError(f"cannot write {what} {target}: {exc.strerror or exc}") from None
    with fh:
        yield fh


def free_bytes(folder: Path) -> int:
    """Bytes this process may still write in ``folder``: the file system's free space
    (root may use the reserved blocks) and the file-size limit ``ulimit -f``."""
    import resource

    st = os.statvfs(folder)
    free = (st.f_bfree if os.geteuid() == 0 else st.f_bavail) * st.f_frsize
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    return free if limit == resource.RLIM_INFINITY else min(free, limit)


@contextmanager
def atomic_path(target: str | os.PathLike, what: str = "output", remove_stale: bool = True,
                size: int | None = None) -> Iterator[Path]:
    """Yield a temporary path; once the block ends without an exception it replaces (or,
    for a device or FIFO, is copied into) ``target``.

    On any exception, or a signal received meanwhile (``signals.check``), the temporary is
    removed and an existing ``target`` is untouched. An ``OSError`` becomes one SpmmgnnError
    ``cannot write WHAT TARGET: reason``. ``size``: the bytes the write will take, checked
    against ``free_bytes`` before anything is written. ``remove_stale``: first delete the
    temporaries of earlier writes of ``target`` whose process is gone.
    """
    signals.check()
    path, in_place = resolve(target, what)
    tmp = None
    try:
        folder = Path(tempfile.gettempdir()) if in_place else path.parent
        folder.mkdir(parents=True, exist_ok=True)
        if remove_stale:
            _remove_stale(folder / path.name)
        if size is not None and size > (free := free_bytes(folder)):
            from .machine import format_bytes_apart

            need, have = format_bytes_apart(size, free)
            raise SpmmgnnError(f"cannot write {what} {target}: it needs about {need} and "
                               f"{folder} has {have} free (disk space or ulimit -f)")
        with signals.deferred():  # a signal between creating and naming it would leak it
            tmp = _temp_in(folder, path.name)
        yield tmp
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        signals.check()
        if in_place:
            _write_in_place(tmp, path)
        else:
            os.chmod(tmp, _mode_for(path))
            os.replace(tmp, path)
    except OSError as exc:
        raise SpmmgnnError(f"cannot write {what} {target}: {exc.strerror or exc}") from None
    finally:
        if tmp is not None and tmp.exists():
            tmp.unlink()


def write_text_atomic(target: str | os.PathLike, text: str, what: str = "output") -> None:
    with atomic_path(target, what, size=len(text.encode())) as tmp:
        tmp.write_text(text)


def check_writable(target: str | os.PathLike, what: str = "output") -> None:
    """SpmmgnnError now, before any work, if ``target`` could not be written later: it is
    a directory, block device or socket, or its folder cannot be created or written."""
    path, in_place = resolve(target, what)
    if in_place:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _temp_in(path.parent, path.name).unlink()
    except OSError as exc:
        raise SpmmgnnError(f"cannot write {what} {target}: {exc.strerror or exc}") from None


def default_mode() -> int:
    """The mode ``open(path, "w")`` gives a new file: ``0o666`` less the umask."""
    return 0o666 & ~_umask()


class SinkFile:
    """A binary file object for writers that must never see a write fail: HDF5 crashes
    (segmentation fault) when a write fails while it closes a dataset or the file, because
    h5py's clean-up then closes objects the failed close left half freed. The first
    ``OSError`` is kept and later writes are dropped; so are writes after a signal
    (``signals.pending``), so the writer ends quickly. ``close()`` raises what was kept.
    For h5py's ``fileobj`` driver (``h5py.File(SinkFile(path), "w")``)."""

    def __init__(self, path: str | os.PathLike):
        self._fh = open(path, "w+b")
        self.error: OSError | None = None

    def _failed(self) -> bool:
        if self.error is None and signals.pending() is not None:
            self.error = OSError(4, "interrupted by a signal")  # EINTR
        return self.error is not None

    def _guard(self, fn, *args):
        try:
            return fn(*args)
        except OSError as exc:
            self.error = exc
            return None

    def write(self, data) -> int:
        if not self._failed():
            self._guard(self._fh.write, data)
        return memoryview(data).nbytes

    def truncate(self, size: int | None = None) -> int:
        if not self._failed():
            self._guard(self._fh.truncate, size)
        return self._fh.tell() if size is None else size

    def flush(self) -> None:
        if not self._failed():
            self._guard(self._fh.flush)

    def seek(self, pos: int, whence: int = 0) -> int:
        return self._fh.seek(pos, whence)

    def tell(self) -> int:
        return self._fh.tell()

    def readinto(self, buffer) -> int:
        return self._fh.readinto(buffer)

    def read(self, size: int = -1) -> bytes:
        return self._fh.read(size)

    def close(self, quiet: bool = False) -> None:
        """Close the file; raise the first failure (a full disk, a signal's EINTR) unless
        ``quiet`` (the writer failed already)."""
        if not self._fh.closed:
            self._guard(self._fh.close)
        if self.error is not None and not quiet:
            raise self.error
