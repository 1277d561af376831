"""Does ``default`` keep its time rule with another process busy on a core (issue 47)?

Each row: ``partition(A, k, method="default")`` (threads left to ``default``: one per idle
core), its seconds against its rule max(3 x its own METIS-vol run, 2 s), without and with
``python -c 'while 1: pass'`` running; the machine's load average at the end of the row.

    python bench/default_rule_load.py > rows.md
"""

import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spmmgnn.data.generators import grid3d, rmat, sbm  # noqa: E402
from spmmgnn.partitioners import partition  # noqa: E402
from spmmgnn.partitioners.budget import default_budget  # noqa: E402

GRAPHS = {"grid3d 30^3": lambda: grid3d(30),
          "sbm 20000": lambda: sbm(20000, 50, avg_degree=10, mixing=0.2, seed=1),
          "rmat s13 e8": lambda: rmat(13, 8, seed=2)}


def main() -> None:
    graphs = {name: make() for name, make in GRAPHS.items()}
    partition(grid3d(8), 2, method="default")  # numba caches, libraries
    print("| graph | k | other process | default s | its METIS-vol s | rule s | default / rule "
          "| chosen | candidates run | load |\n| --- | --- | --- | --- | --- | --- | --- | --- "
          "| --- | --- |")
    for busy in (False, True):
        hog = subprocess.Popen([sys.executable, "-c", "while 1: pass"]) if busy else None
        try:
            for name, A in graphs.items():
                for k in (16, 64):
                    P = partition(A, k, method="default")
                    metis = next(c["seconds"] for c in P.candidates
                                 if c["method"] == "metis-vol")
                    rule = default_budget(metis)
                    ran = sum("skipped" not in c for c in P.candidates)
                    print(f"| {name} | {k} | {'busy core' if busy else 'none'} | "
                          f"{P.seconds:.2f} | {metis:.2f} | {rule:.2f} | {P.seconds / rule:.2f} "
                          f"| {P.method} | {ran} | {os.getloadavg()[0]:.1f} |", flush=True)
        finally:
            if hog:
                hog.kill()
                hog.wait()


if __name__ == "__main__":
    main()
