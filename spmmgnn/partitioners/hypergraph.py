"""KaHyPar and Mt-KaHyPar on the column-net hypergraph (connectivity-1 = total volume, exactly).

Nets are the columns of ``pattern(A) + I`` (see ``model``): net c holds its owner vertex c
and every row with a non-zero in column c, so directed / non-symmetric matrices need no
symmetrization. Nets with a single pin never cost anything and are dropped. Vertex weights
are the row non-zeros (at least 1).

KaHyPar reads its whole configuration from an ``.ini`` file, and an incomplete one aborts
the process, so ``KAHYPAR_CONTEXT`` lists every parameter of a direct k-way connectivity-1
configuration (multilevel with community-aware coarsening, pool initial partitioning by
recursive bisection, k-way FM refinement without flows to keep the time reasonable); it is
written to a temporary file per call.

Mt-KaHyPar is multi-threaded. Its runtime is initialized once per process, so the thread
count of the first call applies to every later call. The ``default`` preset is not
deterministic with more than one thread even for a fixed seed; ``deterministic`` (our
default, so a seed reproduces a partition) is.
"""

from __future__ import annotations

import os
import tempfile
import warnings

import numpy as np
import scipy.sparse as sp

from ..runtime.errors import SpmmgnnError
from .model import ColumnNet

# every parameter KaHyPar's direct k-way context needs; values of a km1 configuration
KAHYPAR_CONTEXT: dict[str, object] = {
    # general
    "mode": "direct",
    "objective": "km1",
    "seed": -1,
    "cmaxnet": 1000,
    "vcycles": 0,
    # preprocessing: min-hash sparsifier and Louvain communities
    "p-use-sparsifier": True,
    "p-sparsifier-min-median-he-size": 28,
    "p-sparsifier-max-hyperedge-size": 1200,
    "p-sparsifier-max-cluster-size": 10,
    "p-sparsifier-min-cluster-size": 2,
    "p-sparsifier-num-hash-func": 5,
    "p-sparsifier-combined-num-hash-func": 100,
    "p-detect-communities": True,
    "p-detect-communities-in-ip": True,
    "p-reuse-communities": False,
    "p-max-louvain-pass-iterations": 100,
    "p-min-eps-improvement": 0.0001,
    "p-louvain-edge-weight": "hybrid",
    # coarsening
    "c-type": "ml_style",
    "c-s": 1,
    "c-t": 160,
    "c-rating-score": "heavy_edge",
    "c-rating-use-communities": True,
    "c-rating-heavy_node_penalty": "no_penalty",
    "c-rating-acceptance-criterion": "best_prefer_unmatched",
    "c-fixed-vertex-acceptance-criterion": "fixed_vertex_allowed",
    # initial partitioning: multilevel recursive bisection with a pool of algorithms
    "i-mode": "recursive",
    "i-technique": "multi",
    "i-c-type": "ml_style",
    "i-c-s": 1,
    "i-c-t": 150,
    "i-c-rating-score": "heavy_edge",
    "i-c-rating-use-communities": True,
    "i-c-rating-heavy_node_penalty": "no_penalty",
    "i-c-rating-acceptance-criterion": "best_prefer_unmatched",
    "i-c-fixed-vertex-acceptance-criterion": "fixed_vertex_allowed",
    "i-algo": "pool",
    "i-runs": 20,
    "i-bp-algorithm": "worst_fit",
    "i-bp-heuristic-prepacking": False,
    "i-bp-early-restart": True,
    "i-bp-late-restart": True,
    "i-r-type": "twoway_fm",
    "i-r-runs": -1,
    "i-r-fm-stop": "simple",
    "i-r-fm-stop-i": 50,
    # refinement: k-way FM on connectivity-1
    "r-type": "kway_fm_km1",
    "r-runs": -1,
    "r-fm-stop": "adaptive_opt",
    "r-fm-stop-alpha": 1,
    "r-fm-stop-i": 350,
}


def context_ini(params: dict[str, object] | None = None) -> str:
    """The text of a KaHyPar ``.ini`` context from ``KAHYPAR_CONTEXT`` updated by ``params``."""
    values = dict(KAHYPAR_CONTEXT, **(params or {}))

    def fmt(v: object) -> str:
        return ("true" if v else "false") if isinstance(v, bool) else str(v)

    return "".join(f"{key}={fmt(v)}\n" for key, v in values.items())


def _nets(cn: ColumnNet) -> tuple[np.ndarray, np.ndarray]:
    """Net offsets and pins with the single-pin nets dropped."""
    sizes = cn.net_sizes()
    keep = sizes > 1
    pin_keep = np.repeat(keep, sizes)
    ptr = np.zeros(int(keep.sum()) + 1, dtype=np.int64)
    np.cumsum(sizes[keep], out=ptr[1:])
    return ptr, cn.npins[pin_keep]


def kahypar_parts(A: sp.csr_array, k: int, loads: np.ndarray, epsilon: float, seed: int = 0,
                  cn: ColumnNet | None = None) -> np.ndarray:
    """Part vector from KaHyPar (direct k-way, connectivity-1) on the column-net hypergraph."""
    import kahypar

    cn = cn or ColumnNet.from_matrix(A)
    ptr, pins = _nets(cn)
    nnets = ptr.size - 1
    hg = kahypar.Hypergraph(cn.n, nnets, ptr.tolist(), pins.tolist(), k, [1] * nnets,
                            np.maximum(loads, 1).tolist())
    ctx = kahypar.Context()
    fd, path = tempfile.mkstemp(prefix="spmmgnn-kahypar-", suffix=".ini")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(context_ini())
        ctx.loadINIconfiguration(path)
    finally:
        os.unlink(path)
    ctx.setK(k)
    ctx.setEpsilon(float(epsilon))
    ctx.setSeed(int(seed) & 0x7FFFFFFF)
    ctx.suppressOutput(True)
    kahypar.partition(hg, ctx)
    return np.fromiter((hg.blockID(v) for v in range(cn.n)), dtype=np.int64, count=cn.n)


_MT: dict[str, object] = {}


def _mt_initializer(threads: int):
    import mtkahypar

    if "init" not in _MT:
        _MT["init"] = mtkahypar.initialize(int(threads), False)
        _MT["threads"] = int(threads)
    elif _MT["threads"] != int(threads):
        warnings.warn(f"Mt-KaHyPar already runs with {_MT['threads']} threads in this process; "
                      f"ignoring threads={threads}", stacklevel=3)
    return _MT["init"]


MT_PRESETS = ("default", "deterministic", "quality", "large_k", "highest_quality")


def mtkahypar_parts(A: sp.csr_array, k: int, loads: np.ndarray, epsilon: float, seed: int = 0,
                    threads: int = 1, preset: str = "deterministic",
                    cn: ColumnNet | None = None) -> np.ndarray:
    """Part vector from Mt-KaHyPar (connectivity-1) on the column-net hypergraph."""
    import mtkahypar

    if preset not in MT_PRESETS:
        raise SpmmgnnError(f"Mt-KaHyPar preset must be one of {MT_PRESETS}, got {preset!r}")
    init = _mt_initializer(threads)
    mtkahypar.set_seed(int(seed) & 0x7FFFFFFF)
    ctx = init.context_from_preset(getattr(mtkahypar.PresetType, preset.upper()))
    ctx.set_partitioning_parameters(k, float(epsilon), mtkahypar.Objective.KM1)
    ctx.logging = False
    cn = cn or ColumnNet.from_matrix(A)
    ptr, pins = _nets(cn)
    nets = [e.tolist() for e in np.split(pins, ptr[1:-1])] if ptr.size > 1 else []
    hg = init.create_hypergraph(ctx, cn.n, len(nets), nets, np.maximum(loads, 1).tolist(),
                                [1] * len(nets))
    return np.asarray(hg.partition(ctx).get_partition(), dtype=np.int64)
