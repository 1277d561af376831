"""The project's benchmark programs, one module each, run from the repository root as
``python -m bench.<name>`` (``docs/benchmarks.md`` lists them). Their shared machinery (the
``mpiexec`` launcher, the machine's facts and rates, the table writer) is the library's
``spmmgnn.benchmark``; ``python -m bench.tables`` writes every result's Markdown again from
its stored JSON."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
