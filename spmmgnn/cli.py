"""The ``spmmgnn`` command: one sub-command per module in ``spmmgnn.commands``.

Failures never leave a rank hanging, whatever ``$SPMMGNN_ABORT_ON_EXCEPTION`` says (the
command installs the abort hook of ``spmmgnn.runtime.abort`` for its threads and for what
escapes the handlers below, unless that variable opts out):

- a SpmmgnnError (bad input) agreed on by every rank prints one line on rank 0 and every rank
  exits with status 2; one raised by a single rank prints ``rank r: error: ...`` and aborts
  the job with status 2; usage errors and ``--help`` print on rank 0 only (every rank parses
  the same arguments, so every rank exits with the same status);
- warnings (``warnings.warn``, e.g. a split that was drawn, not given) print as one line
  ``spmmgnn CMD: warning: ...``;
- any other exception is a bug: the rank prints ``spmmgnn CMD: rank r: <cause>`` and its
  traceback, then aborts the MPI job (status 1; plain exit 1 on a single rank);
- SIGINT / SIGTERM (``mpiexec`` forwards both to every rank): the first rank to handle it
  prints ``rank r: interrupted by SIGINT`` (``terminated by SIGTERM``) and aborts the job with
  status 130 / 143; a rank blocked inside an MPI call at that moment is ended by the abort
  before Python can run its handler, so it may print nothing. When no rank can handle it
  (every rank blocked in MPI), the watchdog of ``spmmgnn.runtime.signals`` prints one line
  and aborts the job a few seconds later. A signal that arrives while Python runs a
  finalizer or a C library's callback is not lost (``spmmgnn.runtime.signals``): it ends
  the command once that returns. Open atomic writes remove their temporary files and keep
  the old target.

Before any work every rank agrees on the command line (``spmmgnn.runtime.agreement``): ranks
given different arguments (an MPMD launch) stop with one line naming each differing setting.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import signal
import sys
import traceback
import warnings

from .commands import check_files
from .runtime import signals, thread_env
from .runtime.abort import install_abort_hook
from .runtime.agreement import agree_on, environment
from .runtime.errors import RankFailed, SpmmgnnError, agree, check_on_root
from .runtime.settings import settings_error
from .runtime.signals import Terminated

KERNEL_COMMANDS = ("train", "spmm", "bench")  # they run the numba kernels
DESCRIPTION = ("Distributed sparse x dense matrix multiplication (SpMM) over MPI and full-batch "
               "GNN training built on it. Run under mpiexec (mpiexec -n P spmmgnn COMMAND ...);"
               " 'spmmgnn COMMAND --help' lists a command's options.")


def _world_rank() -> int:
    from mpi4py import MPI

    return MPI.COMM_WORLD.Get_rank()


class Parser(argparse.ArgumentParser):
    """argparse that speaks on rank 0 only (usage, errors, ``--help``); its sub-command
    parsers are of the same class. Descriptions come from docstrings: their RST double
    backticks are dropped from the help. While ``held`` is a list (``parse_held``), its
    messages go there, to be printed once the ranks agreed that they parsed alike."""

    held: list[tuple[str, object]] | None = None

    def _print_message(self, message, file=None):
        if Parser.held is not None:
            if message:
                Parser.held.append((message, file))
        elif _world_rank() == 0:
            super()._print_message(message, file)

    def format_help(self) -> str:
        return super().format_help().replace("``", "")


def build_parser() -> argparse.ArgumentParser:
    from . import __version__, commands

    parser = Parser(prog="spmmgnn", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"spmmgnn {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if not info.name.startswith("_"):
            importlib.import_module(f"{commands.__name__}.{info.name}").add_parser(sub)
    parser.commands = sub.choices  # each sub-command's parser, by name
    return parser


def parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """The arguments; an unknown option is reported by its sub-command's parser (its usage,
    not the top-level one)."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        parser.commands[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def parse_held(parser: argparse.ArgumentParser, argv: list[str] | None):
    """``parse`` with argparse's messages held: (the arguments, or None after a usage error,
    ``--help`` or ``--version``; that exit status; the messages, for rank 0 to print)."""
    Parser.held = held = []
    try:
        return parse(parser, argv), 0, held
    except SystemExit as exc:
        return None, exc.code if isinstance(exc.code, int) else 2, held
    finally:
        Parser.held = None


def run_settings(parser: argparse.ArgumentParser, args, status: int, held: list) -> dict:
    """What this rank was asked to do, for ``agreement.agree_on``: the sub-command and
    every parsed argument named by its flag; after a usage error, ``--help`` or
    ``--version``, only that (with argparse's own words)."""
    if args is None:
        said = held[-1][0].strip().splitlines()[-1] if held else ""
        what = (f"a usage error ({said.partition('error: ')[2] or said})" if status
                else "--help" if "usage:" in "".join(m for m, _ in held) else "--version")
        return {"the command": what}
    flags = _flags(parser.commands[args.command])
    settings = {"the command": args.command}
    settings.update((flags.get(dest, dest), value) for dest, value in vars(args).items()
                    if dest not in ("command", "func"))
    return settings


def _flags(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Each argument's dest -> its long flag (``--epochs``) or, for a positional, its
    name, through the nested sub-commands (``datasets convert``)."""
    names = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                names.update(_flags(sub))
        if action.dest not in names and action.dest != argparse.SUPPRESS:
            names[action.dest] = (max(action.option_strings, key=len) if action.option_strings
                                  else action.metavar or action.dest)
    return names


def _collective(code: int) -> int:
    """Every rank returns ``code`` together: the exit needs no abort (see ``abort``)."""
    from .runtime.abort import collective_exit

    collective_exit(code)
    return code


def _warning_printer(prog: str):
    def show(message, category, filename, lineno, file=None, line=None):
        print(f"{prog}: warning: {message}", file=file or sys.stderr, flush=True)

    return show


def _end(comm, code: int) -> int:
    """Flush, then abort the job when it has several ranks (so none is left waiting)."""
    sys.stdout.flush()
    sys.stderr.flush()
    if comm.Get_size() > 1:
        comm.Abort(code)
    return code


def _quiet_stdout() -> None:
    """Point the closed stdout at /dev/null, so the interpreter's last flush at exit does
    not fail again (what a command killed by SIGPIPE, status 141, would print: nothing)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def _signalled(comm, prog: str, signum: int) -> int:
    """One line for SIGINT (exit 130) or SIGTERM (143), then end the job."""
    what = "interrupted by SIGINT" if signum == signal.SIGINT else "terminated by SIGTERM"
    print(f"{prog}: rank {comm.Get_rank()} of {comm.Get_size()}: {what}", file=sys.stderr)
    return _end(comm, 130 if signum == signal.SIGINT else 143)


def main(argv: list[str] | None = None) -> int:
    # the command's process is its own: its threads' uncaught exceptions (and anything that
    # escapes the handlers below) abort the job, and the runtimes it loads (torch's OpenMP,
    # numba's) and the processes it starts get the library's idle-thread settings
    install_abort_hook()
    thread_env.for_process()
    previous = signals.install()
    try:
        return _main(argv)
    finally:
        signals.uninstall(previous)


def _main(argv: list[str] | None) -> int:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    prog = "spmmgnn"
    try:
        parser = build_parser()
        args, status, held = parse_held(parser, argv)
        # before any work: every rank was asked the same (an MPMD launch can differ)
        agree_on(comm, {**run_settings(parser, args, status, held), **environment()})
        if args is None:  # usage error, --help or --version: the same on every rank
            if rank == 0:
                for message, file in held:
                    (file or sys.stderr).write(message)
            return _collective(status)
        prog = f"spmmgnn {args.command}"
        agree(comm, settings_error())  # before any work: the SPMMGNN_* numbers
        check_on_root(comm, 0, lambda: check_files(args))
        from .runtime.jit import announce_compile, kernels_cached, notice_prefix

        notice_prefix(prog)  # any kernel numba compiles (partition, model, ...) says so
        if args.command in KERNEL_COMMANDS and not kernels_cached():
            announce_compile()  # before any work: the kernels of every step compile
        with warnings.catch_warnings():
            warnings.showwarning = _warning_printer(prog)
            code = int(args.func(args) or 0)
            signals.check()  # a signal swallowed by a finalizer still ends the command
            return _collective(code)
    except SpmmgnnError as exc:
        if exc.collective or size == 1:  # every rank has it: rank 0 says it, all exit
            if rank == 0:
                print(f"{prog}: error: {exc}", file=sys.stderr, flush=True)
            return _collective(2)
        print(f"{prog}: rank {rank} of {size}: error: {exc}", file=sys.stderr)
        return _end(comm, 2)
    except BrokenPipeError:  # stdout closed by its reader (| head): end quietly
        _quiet_stdout()
        return _end(comm, 141)
    except KeyboardInterrupt:
        return _signalled(comm, prog, signal.SIGINT)
    except Terminated:
        return _signalled(comm, prog, signal.SIGTERM)
    except RankFailed as exc:  # another rank's bug, with its traceback in the message
        print(f"{prog}: rank {rank} of {size}: stopping because {exc}", file=sys.stderr)
        return _end(comm, 1)
    except Exception as exc:
        if signals.pending() is not None:  # the signal's exception, wrapped by the code it
            return _signalled(comm, prog, signals.pending())  # hit (torch's import does)
        print(f"{prog}: rank {rank} of {size}: internal error {type(exc).__name__}: {exc}",
              file=sys.stderr)
        text = traceback.format_exc()
        sys.stderr.write("".join(f"[rank {rank}] {ln}\n" for ln in text.splitlines()))
        return _end(comm, 1)


if __name__ == "__main__":
    sys.exit(main())
