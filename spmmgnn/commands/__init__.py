"""Sub-commands of the ``spmmgnn`` CLI: each module defines ``add_parser(subparsers)``."""

import argparse
import math
import os

from ..grid import parse_grid


def grid_arg(text: str) -> str:
    """``--grid PRxPC[xPL]``: checked here (an argparse error), kept as text ("2x3")."""
    try:
        return "x".join(map(str, parse_grid(text)))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


MAX_COUNT = 2**31 - 1  # an MPI int: ranks, colours and counts beyond it overflow


def count_arg(minimum: int):
    """An argparse type: an integer in [minimum, 2**31 - 1] (an argparse error otherwise,
    not an OverflowError deep in MPI or numpy)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if not minimum <= value <= MAX_COUNT:
            raise argparse.ArgumentTypeError(f"must be an integer in [{minimum}, {MAX_COUNT}],"
                                             f" got {value}")
        return value

    parse.__name__ = "integer"
    return parse


def real_arg(minimum: float, maximum: float = math.inf):
    """An argparse type: a finite number in [minimum, maximum] (an argparse error otherwise,
    not an OverflowError from ``int(inf)`` deep in a generator)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not (math.isfinite(value) and minimum <= value <= maximum):
            upper = "" if maximum == math.inf else f", at most {maximum:g}"
            raise argparse.ArgumentTypeError(f"must be a finite number >= {minimum:g}{upper}, "
                                             f"got {text}")
        return value

    parse.__name__ = "number"
    return parse


PARTS_PER_NODE_HELP = ("with a twolevel:<method> partitioner: the block rows of one node "
                       "(its ranks / c)")


def check_parts_per_node(method: str, K: int | None, parts: dict[str, int],
                         flag: str) -> None:
    """``--parts-per-node K`` goes with a ``twolevel:`` partitioner (given by ``flag``), and it
    with K, a divisor of every block-row count in ``parts`` (its flag or point -> k): the
    partitioner's own error would name its internal ``parts_per_node``."""
    from ..partitioners.twolevel import is_two_level
    from ..runtime.errors import SpmmgnnError

    where = ", ".join(f"{name} {k}" for name, k in parts.items())
    if is_two_level(method) and K is None:
        raise SpmmgnnError(f"{flag} {method} partitions the nodes first: give "
                           "--parts-per-node K (the block rows of one node, a divisor of "
                           f"{where})")
    if K is not None and not is_two_level(method):
        raise SpmmgnnError("--parts-per-node applies to the twolevel:<method> partitioners "
                           f"only, not to {flag} {method}")
    bad = [f"{name} {k}" for name, k in parts.items() if k % K] if K is not None else []
    if bad:
        raise SpmmgnnError(f"--parts-per-node {K} must be a positive divisor of "
                           f"{', '.join(bad)}")


ROW_WEIGHT_HELP = ("with a partitioner: each vertex weighs its row's non-zeros plus this many, "
                   "so the block rows balance rows as well as non-zeros (a GCN step's dense "
                   "part costs per row about what 16 non-zeros cost its SpMMs; with 0 a "
                   "power-law graph's block rows can hold several times the average rows: "
                   "docs/partitioning.md)")


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


def file_roles(parser: argparse.ArgumentParser, inputs: dict[str, str] | None = None,
               outputs: dict[str, str] | None = None) -> None:
    """Declare which of ``parser``'s arguments name files it reads (``inputs``) and writes
    (``outputs``), each as {dest: the flag as the help shows it}; ``check_files`` compares
    them before the command runs. A value may be a list (``nargs``)."""
    parser.set_defaults(file_inputs=dict(inputs or {}), file_outputs=dict(outputs or {}))


def _same_file(a: str, b: str) -> bool:
    """Do paths ``a`` and ``b`` name one file: the same resolved path (symbolic links
    followed, also to a file not made yet), or one file reached by two names (hard links)."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet)
        return False


def _named(args: argparse.Namespace, roles: dict[str, str]) -> list[tuple[str, str]]:
    """(flag, path) for each path the arguments in ``roles`` hold."""
    found = []
    for dest, flag in roles.items():
        value = getattr(args, dest, None)
        for path in value if isinstance(value, (list, tuple)) else [value]:
            if path is not None and str(path) != "":
                found.append((flag, str(path)))
    return found


def check_files(args: argparse.Namespace) -> None:
    """SpmmgnnError, before any work, if an output the command would write is one of its
    existing inputs or another of its outputs (resolved, symbolic and hard links included):
    the run would replace its own input, or one output the other. One argument that is both
    read and written (``train --resume --checkpoint``) is not compared with itself."""
    from ..runtime.errors import SpmmgnnError

    outputs = _named(args, getattr(args, "file_outputs", {}))
    inputs = [(flag, path) for flag, path in _named(args, getattr(args, "file_inputs", {}))
              if os.path.exists(path)]  # a spec like 'csbm' or 'rmat:scale=10' is no file
    for i, (flag, path) in enumerate(outputs):
        for in_flag, in_path in inputs:
            if in_flag != flag and _same_file(path, in_path):
                raise SpmmgnnError(f"{flag} {path} is the input file {in_path} ({in_flag}): "
                                   "writing it would replace the input; give another name")
        for other_flag, other in outputs[:i]:
            if other_flag != flag and _same_file(path, other):
                raise SpmmgnnError(f"{flag} {path} and {other_flag} {other} are the same "
                                   "file: one output would replace the other; give another "
                                   "name")
