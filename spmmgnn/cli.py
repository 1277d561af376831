"""The ``spmmgnn`` command: one sub-command per module in ``spmmgnn.commands``.

Errors: a SpmmgnnError (bad input, collectively agreed) prints one line on rank 0 and every
rank exits with status 2; any other exception prints its traceback and aborts the MPI job so
no rank is left hanging in a collective.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
import traceback

from .errors import SpmmgnnError


def build_parser() -> argparse.ArgumentParser:
    from . import __version__, commands

    parser = argparse.ArgumentParser(prog="spmmgnn", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"spmmgnn {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if not info.name.startswith("_"):
            importlib.import_module(f"{commands.__name__}.{info.name}").add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from mpi4py import MPI

    rank = MPI.COMM_WORLD.Get_rank()
    try:
        return int(args.func(args) or 0)
    except SpmmgnnError as exc:
        if rank == 0:
            print(f"spmmgnn {args.command}: error: {exc}", file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception:
        traceback.print_exc()
        sys.stderr.flush()
        if MPI.COMM_WORLD.Get_size() > 1:
            MPI.COMM_WORLD.Abort(1)
        return 1


if __name__ == "__main__":
    sys.exit(main())
