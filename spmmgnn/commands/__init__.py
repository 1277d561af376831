"""Sub-commands of the ``spmmgnn`` CLI: each module defines ``add_parser(subparsers)``."""

import argparse

from ..grid import parse_grid


def grid_arg(text: str) -> str:
    """``--grid PRxPC[xPL]``: checked here (an argparse error), kept as text ("2x3")."""
    try:
        return "x".join(map(str, parse_grid(text)))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


RANKS_PER_NODE_HELP = ("group consecutive ranks K at a time into nodes (a cluster simulated "
                       "on one machine; default: the ranks that share memory); the node-aware "
                       "exchange and the bytes per tier use it")
EXCHANGE_HELP = ("the halo exchange of the sparse algorithms: 'flat' (every rank sends every "
                 "peer its rows), 'node' (a row crosses between two nodes once: gathered in "
                 "the node, sent once per node pair, distributed in the node) or 'auto' "
                 "(the two-tier model picks per row width; docs/algorithms/node-aware.md)")

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
