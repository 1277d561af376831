"""METIS k-way (pymetis) on the symmetrized graph, edge-cut or communication-volume objective.

METIS partitions undirected graphs, so a non-symmetric A is symmetrized (pattern of A + A^T).
For a symmetric A the volume objective (each vertex counted once per other part among its
neighbours) is exactly the total volume of docs/metrics.md; for a directed A it is an estimate and
only the hypergraph methods see the true cost. Vertex weights are the row non-zeros (the
compute load; at least 1 so empty rows still count), edges are unweighted.

On a graph of ``IN_CHILD_NNZ`` non-zeros or more, METIS runs in a forked child
(``budget.run_until``): a signal is handled by Python between bytecodes, so during one long C
call SIGINT / SIGTERM waited for METIS to return (155 s in ``spmmgnn datasets``); with METIS
in a child the caller's handler runs at once, and leaving ``run_until`` kills the child.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from ..runtime.errors import SpmmgnnError
from .budget import run_until
from .model import symmetric_graph

OBJECTIVES = ("cut", "vol")
IN_CHILD_NNZ = 1_000_000  # METIS takes about a second from here on (2 cores)


def metis_parts(A: sp.csr_array, k: int, loads: np.ndarray, epsilon: float, seed: int = 0,
                objective: str = "vol") -> np.ndarray:
    """Part vector from METIS k-way with imbalance ``epsilon`` (METIS ufactor = 1000 eps)."""
    import pymetis

    if objective not in OBJECTIVES:
        raise SpmmgnnError(f"METIS objective must be one of {OBJECTIVES}, got {objective!r}")
    G = symmetric_graph(A)
    idx = pymetis.zero_copy_dtype()
    xadj = G.indptr.astype(idx)
    adjncy = G.indices.astype(idx)
    vweights = np.maximum(loads, 1).astype(idx)
    objtype = pymetis.ObjType.VOL if objective == "vol" else pymetis.ObjType.CUT
    options = pymetis.Options(seed=int(seed) & 0x7FFFFFFF, objtype=int(objtype),
                              ufactor=max(1, int(round(1000 * epsilon))))

    def call() -> np.ndarray:
        res = pymetis.part_graph(k, pymetis.CSRAdjacency(xadj, adjncy), vweights=vweights,
                                 recursive=False, options=options)
        return np.asarray(res.vertex_part, dtype=np.int64)

    if G.nnz >= IN_CHILD_NNZ:
        parts = run_until(call, math.inf)  # a signal meanwhile ends the child and the caller
        if parts is not None and parts.shape == (G.shape[0],):
            return parts
    try:  # small, no fork, or the child failed: here, where METIS's error is seen
        return call()
    except Exception as exc:  # METIS reports failures as generic errors
        raise SpmmgnnError(f"METIS failed: {exc}") from None
