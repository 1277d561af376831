"""Sub-commands of the ``spmmgnn`` CLI: each module defines ``add_parser(subparsers)``."""

import argparse

from ..grid import parse_grid


def grid_arg(text: str) -> str:
    """``--grid PRxPC[xPL]``: checked here (an argparse error), kept as text ("2x3")."""
    try:
        return "x".join(map(str, parse_grid(text)))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


GRID_HELP = ("the 2D (PRxPC) or 3D (PRxPCxPL) grid of the 2D/3D algorithms; default: the "
             "factors of P closest to a square (cube)")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Adds ``(default: X)`` to an option's help unless the help already names its default
    or there is none to show (no value, a flag)."""

    def _get_help_string(self, action) -> str:
        text = action.help or ""
        if "default" in text or action.default in (None, False, argparse.SUPPRESS):
            return text
        return super()._get_help_string(action)
