"""Contextual stochastic block model (CSBM): a learnable synthetic graph for node classification.

Every vertex gets a class ``y`` uniformly at random (so vertex ids carry no class structure and
contiguous block rows are not class-aligned). Edges: each of ``n * avg_degree / 2`` undirected
edges picks a random source; with probability ``homophily`` its other end is drawn from the
source's class, otherwise from all vertices. Features: ``x_v = signal * mu_{y_v} + N(0, I)``
with random unit class means ``mu_c``. Neither the graph alone (``homophily < 1``) nor the
features alone (low ``signal``) determine the class; combining them is what a GNN learns, so
the two knobs set the difficulty. Everything is vectorized and seeded.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..runtime.errors import SpmmgnnError
from .generators import check_size
from .graph import Graph
from .splits import random_split

# the class means' length in noise units: beyond this the float32 features overflow
MAX_SIGNAL = 1e30
DEFAULTS = dict(n=20000, avg_degree=16.0, num_features=64, num_classes=8, homophily=0.5,
                signal=0.85)


def csbm(n: int = DEFAULTS["n"], avg_degree: float = DEFAULTS["avg_degree"],
         num_features: int = DEFAULTS["num_features"],
         num_classes: int = DEFAULTS["num_classes"], homophily: float = DEFAULTS["homophily"],
         signal: float = DEFAULTS["signal"], seed: int = 0,
         split=(0.6, 0.2, 0.2)) -> Graph:
    """Generate an undirected CSBM graph with features, labels and a random split."""
    if not all(np.isfinite(v) for v in (avg_degree, homophily, signal)):
        raise SpmmgnnError(f"csbm: degree, homophily and signal must be finite numbers, got "
                           f"{avg_degree}, {homophily}, {signal}")
    if n < 2 or num_classes < 1 or num_features < 1 or avg_degree < 0:
        raise SpmmgnnError("csbm needs n >= 2, classes >= 1, features >= 1, degree >= 0")
    if abs(signal) > MAX_SIGNAL:
        raise SpmmgnnError(f"csbm: signal {signal:g} makes the float32 features overflow: "
                           f"keep it within {MAX_SIGNAL:g}")
    if not 0.0 <= homophily <= 1.0:
        raise SpmmgnnError(f"homophily must lie in [0, 1], got {homophily}")
    # the edges, x in float64 and float32, and the class means
    check_size("csbm", n, n * avg_degree,
               (12 * float(n) + 8 * float(num_classes)) * num_features)
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, num_classes, n).astype(np.int64)
    by_class = np.argsort(labels, kind="stable")
    starts = np.zeros(num_classes + 1, dtype=np.int64)
    np.cumsum(np.bincount(labels, minlength=num_classes), out=starts[1:])
    sizes = np.diff(starts)

    m = int(round(n * avg_degree / 2))
    src = rng.integers(0, n, m)
    dst = rng.integers(0, n, m)
    inside = rng.random(m) < homophily
    c = labels[src[inside]]
    dst[inside] = by_class[starts[c] + (rng.random(c.size) * sizes[c]).astype(np.int64)]
    keep = src != dst
    src, dst = src[keep], dst[keep]
    rows, cols = np.concatenate([src, dst]), np.concatenate([dst, src])
    A = sp.csr_array((np.ones(rows.size), (rows, cols)), shape=(n, n))
    A.sum_duplicates()
    A.data[:] = 1.0

    means = rng.standard_normal((num_classes, num_features))
    means /= np.linalg.norm(means, axis=1, keepdims=True)
    x = rng.standard_normal((n, num_features)) + signal * means[labels]
    return Graph(adj=A, features=x.astype(np.float32), labels=labels,
                 masks=random_split(n, seed + 1, split), num_classes=num_classes,
                 directed=False, name=f"csbm-n{n}")
