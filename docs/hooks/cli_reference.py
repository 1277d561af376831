"""MkDocs hook: render ``spmmgnn --help`` and every sub-command's help into the CLI page.

The page source holds only the placeholder below; the text is generated from
``spmmgnn.cli.build_parser()`` at build time, so the reference cannot drift from the code.
Nested sub-commands (``spmmgnn datasets convert`` ...) are walked recursively.
"""

from __future__ import annotations

import argparse
import os

PLACEHOLDER = "<!-- cli-reference -->"
WIDTH = "100"  # argparse wraps at $COLUMNS; fixed so the page does not depend on the terminal


def _subparsers(parser: argparse.ArgumentParser):
    """(name, parser) of each sub-command of ``parser``, in the order they were added."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            seen = set()
            for name, sub in action.choices.items():
                if id(sub) not in seen:  # aliases point at the same parser
                    seen.add(id(sub))
                    yield name, sub


def _render(parser: argparse.ArgumentParser, level: int) -> list[str]:
    lines = [f"{'#' * level} `{parser.prog}`", "", "```text", parser.format_help().rstrip(),
             "```", ""]
    for _name, sub in _subparsers(parser):
        lines += _render(sub, min(level + 1, 6))
    return lines


def cli_reference() -> str:
    """The whole reference as Markdown."""
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        from spmmgnn.cli import build_parser

        return "\n".join(_render(build_parser(), 2))
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old


def on_page_markdown(markdown: str, page, config, files) -> str:
    if PLACEHOLDER not in markdown:
        return markdown
    return markdown.replace(PLACEHOLDER, cli_reference())
