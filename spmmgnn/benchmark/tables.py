"""Results as Markdown: one table writer for every benchmark.

A benchmark keeps what it measured as JSON and renders its Markdown from that JSON alone
(``render(data) -> str``), so the table can be written again from the stored JSON at any
time and gives the same text. ``md_table`` draws a table from a header and rows;
``publish`` writes a result's JSON and its Markdown side by side, atomically;
``regenerate`` rewrites the Markdown from the JSON.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from ..runtime.atomic import write_text_atomic
from .harness import write_json

Render = Callable[[dict], str]


def md_table(head: Sequence[str], rows: Iterable[Sequence], align: str | None = None,
             spaced: bool = False) -> list[str]:
    """The lines of a Markdown table: ``head``, the rule, one line per row (cells as given:
    format them first; an empty cell is ``| |``). ``align`` has one letter per column, ``l``
    or ``r`` (default all ``l``); ``spaced`` draws the rule as ``| --- |`` instead of
    ``|---|``."""
    align = align or "l" * len(head)
    if len(align) != len(head):
        raise ValueError(f"align {align!r} has {len(align)} columns, the header {len(head)}")
    marks = ["---:" if a == "r" else "---" for a in align]
    rule = ("| " + " | ".join(marks) + " |") if spaced else ("|" + "|".join(marks) + "|")
    return [_line(head), rule, *(_line(row) for row in rows)]


def _line(cells: Iterable) -> str:
    return "|" + "|".join(f" {c} " if str(c) else " " for c in cells) + "|"


def where(machine: dict) -> str:
    """The machine's name in a result's heading: its CPU model, else what ``platform`` says
    (results written before the model was recorded)."""
    return machine.get("cpu") or machine.get("processor") or machine.get("platform") or "cpu"


def publish(stem: str | os.PathLike, data: dict, render: Render) -> tuple[Path, Path]:
    """Write ``STEM.json`` (``data``) and ``STEM.md`` (``render(data)``); returns both."""
    stem = Path(stem)
    json_path = write_json(stem.with_suffix(".json"), data)
    md_path = stem.with_suffix(".md")
    write_text_atomic(md_path, render(data))
    return json_path, md_path


def load(stem: str | os.PathLike) -> dict:
    """The stored JSON of a result."""
    return json.loads(Path(stem).with_suffix(".json").read_text())


def regenerate(stem: str | os.PathLike, render: Render, check: bool = False) -> bool:
    """Render ``STEM.md`` again from ``STEM.json``. With ``check``, write nothing and say
    whether the stored Markdown is what the JSON renders to; else write it (True)."""
    stem = Path(stem)
    text = render(load(stem))
    md = stem.with_suffix(".md")
    if check:
        return md.exists() and md.read_text() == text
    write_text_atomic(md, text)
    return True
