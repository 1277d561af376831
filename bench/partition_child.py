"""One row of ``bench.partition`` in a fresh process: build (or load) the graph, warm the
numba caches and METIS on a tiny graph, partition, print the row as one JSON line.

    python -m bench.partition_child '{"code": ".", "graph": "wordnet", "k": 16, ...}'

``code`` is the root of the spmmgnn to measure: this tree, or another commit's unpacked
with ``git archive`` (the paired A/B of ``--baseline``; ``bench.partition.child`` starts
this module with that tree's ``spmmgnn`` first on the import path). A fresh process per row
gives every method the same start and its own peak memory: ``peak_rss_mib`` is the process's peak
resident set (``ru_maxrss``, with any child Mt-KaHyPar ran in), ``graph_rss_mib`` the peak
before partitioning (the graph, the interpreter, the libraries).
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path


def _mib(who: int) -> float:
    return resource.getrusage(who).ru_maxrss / 1024.0


def main(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    from bench import real_graphs
    from spmmgnn.data.generators import grid3d, rmat, sbm
    from spmmgnn.partitioners import METHODS, partition

    name = spec["graph"]
    if name.startswith("npy:"):  # bench.large_graph's files, memory-mapped
        from bench.large_graph import lean_matrix

        A = lean_matrix(name[4:])
    elif name in real_graphs.GRAPHS:
        A = real_graphs.load(name, Path(spec["deb_root"]))
    elif name == "rmat":
        A = rmat(spec["rmat_scale"], 16, seed=spec["seed"], symmetric=True, permute=True)
    elif name == "grid":
        A = grid3d(spec["grid"])
    else:
        A = sbm(spec["sbm_n"], spec["sbm_communities"], avg_degree=16.0, mixing=0.2,
                seed=spec["seed"])
    if spec.get("coarsen_above") is not None:  # KaMinPar on the contraction from this n x k
        from spmmgnn.partitioners import contract

        contract.COARSEN_ABOVE = int(spec["coarsen_above"])
    for warm in ("metis-vol+multilevel", "kaminpar", "default"):  # deadline paths too
        if warm in METHODS or warm == "default":
            partition(grid3d(8), 2, method=warm, threads=spec["threads"])
    base = _mib(resource.RUSAGE_SELF)
    options = {} if spec.get("time_budget") is None else dict(time_budget=spec["time_budget"])
    t = time.perf_counter()
    P = partition(A, spec["k"], method=spec["method"], epsilon=spec["epsilon"],
                  seed=spec["seed"], threads=spec["threads"], **options)
    wall = time.perf_counter() - t
    if spec.get("save_parts"):  # bench.large_graph --save-parts: the write and training
        import numpy as np

        np.save(spec["save_parts"], P.parts)
    row = dict(n=A.shape[0], nnz=int(A.nnz), resolved=P.method, seconds=P.seconds,
               wall_seconds=wall, candidates=P.candidates, graph_rss_mib=base,
               peak_rss_mib=max(_mib(resource.RUSAGE_SELF), _mib(resource.RUSAGE_CHILDREN)),
               **P.metrics.as_dict())
    print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
