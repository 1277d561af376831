"""spmmgnn report: Markdown summary and PNG plots of a ``spmmgnn bench`` results file.

    spmmgnn report results.jsonl -o report/
"""

from __future__ import annotations

from mpi4py import MPI

from . import file_roles


def add_parser(sub) -> None:
    p = sub.add_parser("report", help="Markdown summary and PNG plots of bench results",
                       description=__doc__.splitlines()[0])
    p.add_argument("results", help="results file written by spmmgnn bench (JSON lines)")
    p.add_argument("-o", "--out", default="report", help="output folder")
    p.set_defaults(func=run)
    file_roles(p, inputs={"results": "results"}, outputs={"out": "-o"})


def run(args) -> int:
    from ..benchmark.records import read_records
    from ..benchmark.report import write_report
    from ..runtime.errors import SpmmgnnError, check_on_root

    comm = MPI.COMM_WORLD

    def work():
        records = read_records(args.results)
        if not records:
            raise SpmmgnnError(f"{args.results} holds no results")
        return write_report(records, args.out)

    paths = check_on_root(comm, 0, work)
    if comm.rank == 0:
        names = [str(p.relative_to(args.out)) if p.is_relative_to(args.out) else str(p)
                 for p in paths]
        print(f"spmmgnn report: wrote {len(paths)} files to {args.out}: "
              + ", ".join(names), flush=True)
    return 0
