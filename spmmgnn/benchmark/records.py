"""The results file of ``spmmgnn bench``: one JSON object per line, only ever appended to.

Every reader goes through ``read_records``, which checks each line against the record
schema and names the first bad one as ``FILE:LINE``: a file another tool (or a person)
edited gives one readable line, not a ``KeyError`` deep in a plot. Lines that are not
complete JSON are the torn tails of interrupted appends (``append_record`` closes them
before writing), so they are skipped with a warning, never an error.

A run can appear more than once: a failed run is retried on the next restart and its new
record appended. ``latest`` keeps the newest record of each ``run_id``; ``done_ids`` counts
a run as done only when that newest record succeeded.
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

from ..data.limits import check_input_file
from ..runtime.atomic import open_append
from ..runtime.errors import SpmmgnnError

_NUMBER = (int, float)
JSON_INFLATION = 8  # bytes of Python objects per byte of JSON text, about

# Keys of a sweep run's configuration (written for failed runs too) and of its result.
RUN_KEYS: dict[str, type | tuple] = dict(
    run_id=str, graph=str, mode=str, algorithm=str, P=int, c=int, partitioner=str,
    codec=str, f=int)
RESULT_KEYS: dict[str, type | tuple] = dict(seconds=_NUMBER, breakdown=dict, per_rank=dict)
NETWORK_KEYS: dict[str, type | tuple] = dict(alpha=_NUMBER, beta=_NUMBER, P=int,
                                             all_to_all=dict)


def _kind(value) -> str:
    return "null" if value is None else type(value).__name__


def _want(kind) -> str:
    return "a number" if kind == _NUMBER else f"a {kind.__name__}"


def _check_keys(rec: dict, keys: dict, where: str) -> None:
    missing = [k for k in keys if k not in rec]
    if missing:
        raise SpmmgnnError(f"{where}: record lacks {missing}")
    for k, kind in keys.items():
        v = rec[k]
        if isinstance(v, bool) or not isinstance(v, kind):
            raise SpmmgnnError(f"{where}: {k} must be {_want(kind)}, got {_kind(v)}")
        if kind == _NUMBER:
            _check_number(v, k, where)


def _check_number(v, name: str, where: str) -> None:
    if isinstance(v, bool) or not isinstance(v, _NUMBER) or not (math.isfinite(v) and v >= 0):
        raise SpmmgnnError(f"{where}: {name} must be finite and >= 0, got {v!r}")


def check_record(rec, where: str) -> dict:
    """``rec`` if it is a network record or a sweep run (failed or not), else an error."""
    if not isinstance(rec, dict):
        raise SpmmgnnError(f"{where}: not a JSON object but a {_kind(rec)}")
    if not isinstance(rec.get("machine", {}), dict):
        raise SpmmgnnError(f"{where}: machine must be an object")
    if rec.get("kind") == "network":
        if "mode" in rec:
            raise SpmmgnnError(f"{where}: a network record has no mode")
        _check_keys(rec, NETWORK_KEYS, where)
        _check_keys(rec["all_to_all"], dict(alpha=_NUMBER, beta=_NUMBER),
                    f"{where}: all_to_all")
        return rec
    if rec.get("mode") not in ("spmm", "train"):
        raise SpmmgnnError(f"{where}: neither a sweep run (mode spmm or train) nor a network "
                           f"record (kind network)")
    _check_keys(rec, RUN_KEYS, where)
    for k in ("P", "c", "f"):
        if rec[k] < 1:
            raise SpmmgnnError(f"{where}: {k} must be positive, got {rec[k]}")
    if "error" in rec:
        if not isinstance(rec["error"], str):
            raise SpmmgnnError(f"{where}: error must be a string")
        return rec
    _check_keys(rec, RESULT_KEYS, where)
    for name, v in rec["breakdown"].items():
        _check_number(v, f"breakdown.{name}", where)
    for name, v in rec["per_rank"].items():
        if not isinstance(v, list) or len(v) != rec["P"]:
            raise SpmmgnnError(f"{where}: per_rank.{name} must be a list of P = {rec['P']} "
                               "numbers")
        for x in v:
            _check_number(x, f"per_rank.{name}", where)
    for name in ("accuracy", "max_rel_error"):
        if rec.get(name) is not None:
            _check_number(rec[name], name, where)
    return rec


def _lines(path: str | Path, appending: bool = False) -> list[str] | None:
    """The file's lines (None: no such file), its size checked first (``JSON_INFLATION``
    times it must fit in memory). A device or FIFO is refused, except when ``appending``
    (``bench -o /dev/null``): it holds no records then."""
    p = Path(path)
    if not p.exists():
        return None
    if appending and not p.is_file() and not p.is_dir():
        return []
    check_input_file(p, "results file", JSON_INFLATION)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise SpmmgnnError(f"cannot read {path}: {exc.strerror}") from None
    try:
        return data.decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise SpmmgnnError(f"{path}:{line}: not UTF-8 text (byte {exc.start}); not a "
                           "results file of spmmgnn bench?") from None


def _parse(path: str | Path, lines: list[str]) -> list[dict]:
    out, torn = [], []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            if not line.lstrip().startswith("{"):  # every record starts so, torn or not
                raise SpmmgnnError(f"{path}:{i}: not a record of spmmgnn bench (a results "
                                   "file holds one JSON object per line); not a results "
                                   "file? give another file") from None
            torn.append(i)
            continue
        except RecursionError:
            raise SpmmgnnError(f"{path}:{i}: JSON nested too deeply") from None
        out.append(check_record(rec, f"{path}:{i}"))
    if torn:
        shown = ", ".join(map(str, torn[:5])) + (" ..." if len(torn) > 5 else "")
        warnings.warn(f"{path}: skipped {len(torn)} line(s) that are not complete JSON "
                      f"(interrupted writes?): line {shown}", stacklevel=3)
    return out


def read_records(path: str | Path) -> list[dict]:
    """Every record of a results file, checked, in file order."""
    lines = _lines(path)
    if lines is None:
        raise SpmmgnnError(f"results file {path} does not exist")
    return _parse(path, lines)


def latest(records: list[dict]) -> list[dict]:
    """The newest record of each sweep run (by run_id; network records are all kept), in the
    order of their newest appearance."""
    last: dict = {}
    for i, r in enumerate(records):
        last[r["run_id"] if "mode" in r else ("record", i)] = i
    keep = sorted(last.values())
    return [records[i] for i in keep]


def done_ids(path: str | Path) -> tuple[set[str], int]:
    """(run_ids whose newest record succeeded, number of runs whose newest record failed);
    a missing file has neither. Failed runs are retried by a restart."""
    lines = _lines(path, appending=True)
    if lines is None:
        return set(), 0
    newest = latest(_parse(path, lines))
    done = {r["run_id"] for r in newest if "mode" in r and "error" not in r}
    failed = sum(1 for r in newest if "mode" in r and "error" in r)
    return done, failed


def append_record(path: str | Path, record: dict) -> None:
    """Append one JSON line (never rewrites the file); a torn previous line is closed first.
    A device or FIFO is written in place (``atomic.open_append``)."""
    text = json.dumps(record, sort_keys=True) + "\n"
    new = not Path(path).exists()
    with open_append(path, "results file") as fh:
        size = fh.seek(0, 2) if fh.seekable() else None
        try:
            if size:
                fh.seek(-1, 2)
                if fh.read(1) != b"\n":
                    text = "\n" + text
            data = text.encode()
            while data:  # an unbuffered write may take part of it
                data = data[fh.write(data):]
        except OSError as exc:
            _undo(fh, path, size, new)
            raise SpmmgnnError(f"cannot append to results file {path}: "
                               f"{exc.strerror or exc}") from None


def _undo(fh, path, size: int | None, new: bool) -> None:
    """A failed append (a full disk) leaves the file as it was: cut back to ``size``, or
    removed when the append created it."""
    if size is None:
        return
    try:
        fh.truncate(size)
        if new:  # the file a link named, not the link
            Path(path).resolve().unlink()
    except OSError:
        pass
