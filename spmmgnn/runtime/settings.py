"""The numeric ``SPMMGNN_*`` environment settings, read by one parser.

Each setting names what it takes; a value that is malformed, not finite (``inf``, ``nan``,
``1e400``) or below the setting's minimum is one ``SpmmgnnError`` line naming the variable,
what it takes and what it holds, never an ``OverflowError`` deep in the code that uses it.
An unset or empty variable means the setting's default (``None``).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from .errors import SpmmgnnError


@dataclass(frozen=True)
class Setting:
    """``what``: how the error line describes the value; ``minimum``: the smallest allowed;
    ``integer``: the text must be a whole number (a count), else any finite number, rounded
    down when ``whole`` (bytes); ``words``: texts returned as they are (``auto``)."""

    what: str
    minimum: float
    integer: bool = False
    whole: bool = False
    words: tuple[str, ...] = ()


SETTINGS = {
    "SPMMGNN_THREADS": Setting("a positive integer", 1, integer=True),
    "SPMMGNN_BUSY_CORES": Setting("'auto' or a number of cores >= 0", 0, words=("auto",)),
    "SPMMGNN_AVAILABLE_MEMORY": Setting("a number of bytes >= 0", 0, whole=True),
    "SPMMGNN_DEVICE_MEMORY": Setting("a number of bytes >= 0", 0, whole=True),
    "SPMMGNN_LLC_BYTES": Setting("a number of bytes >= 1", 1, whole=True),
}


# "0": every collective posted anew instead of persistent (``exchange.persistent``)
PERSISTENT = "SPMMGNN_PERSISTENT"


def persistent_setting() -> str:
    """``$SPMMGNN_PERSISTENT`` as it acts: "0" (off) or "1" (on where the library has them,
    the default). Every rank must see the same (``agreement.environment``): a persistent
    collective never matches a plain one."""
    return "0" if os.environ.get(PERSISTENT, "").strip() == "0" else "1"


def _reason(text: str, value: float, setting: Setting) -> str | None:
    """Why ``value`` (parsed from ``text``) is refused, or None."""
    if not math.isfinite(value):
        return "not a finite number"
    if value < setting.minimum:
        return "negative" if value < 0 else f"below {setting.minimum:g}"
    return None


def env_setting(name: str) -> int | float | str | None:
    """``$name`` parsed as ``SETTINGS[name]`` says: None when unset or empty, one of its
    words (lower-cased), an ``int`` for counts and bytes, else a ``float``. SpmmgnnError
    (one line) for anything else."""
    setting = SETTINGS[name]
    text = os.environ.get(name, "").strip()
    if not text:
        return None
    if text.lower() in setting.words:
        return text.lower()
    why = "malformed"
    try:
        value = int(text) if setting.integer else float(text)
    except ValueError:
        value = None
    if value is not None:
        why = _reason(text, value, setting)
        if why is None:
            return int(value) if setting.whole else value
    raise SpmmgnnError(f"${name} must be {setting.what}, got {text!r} ({why})")


def settings_error() -> str | None:
    """The error line of the first numeric setting that does not parse, or None: what the
    command line checks on every rank before any work."""
    for name in SETTINGS:
        try:
            env_setting(name)
        except SpmmgnnError as exc:
            return str(exc)
    return None
