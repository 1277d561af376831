"""Graph specs of the sweeps: ``rmat:scale=14,edge_factor=8``, ``random:n=20000,avg_degree=16``,
``sbm:n=20000,communities=100,mixing=0.2`` (communities a partitioner can find),
``csbm:n=20000,avg_degree=16`` (features, labels and split: the one generator training can
use), or the path of any graph file ``spmmgnn`` loads. Specs are strings so a results line
records exactly which graph a run used."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..data.graph import Graph
from ..runtime.errors import SpmmgnnError

# name -> {parameter: type}; the values are passed as keyword arguments to the generator
PARAMS: dict[str, dict[str, type]] = {
    "rmat": dict(scale=int, edge_factor=int, seed=int),
    "random": dict(n=int, avg_degree=float, seed=int),
    "sbm": dict(n=int, communities=int, avg_degree=float, mixing=float, seed=int),
    "csbm": dict(n=int, avg_degree=float, num_features=int, num_classes=int,
                 homophily=float, signal=float, seed=int),
}


def parse_spec(spec: str) -> tuple[str, dict]:
    """``"rmat:scale=14,edge_factor=8"`` -> ("rmat", {"scale": 14, "edge_factor": 8});
    a file path -> ("file", {"path": ...})."""
    name, _, rest = spec.partition(":")
    if name not in PARAMS:
        if Path(spec).exists():
            return "file", dict(path=spec)
        raise SpmmgnnError(f"graph {spec!r}: neither a file nor one of "
                           f"{', '.join(f'{g}:key=value,...' for g in PARAMS)}")
    kwargs = {}
    for item in filter(None, rest.split(",")):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or key not in PARAMS[name]:
            raise SpmmgnnError(f"graph {spec!r}: {item!r} is not key=value with key one of "
                               f"{', '.join(PARAMS[name])}")
        try:
            kwargs[key] = PARAMS[name][key](value)
        except ValueError:
            raise SpmmgnnError(f"graph {spec!r}: {key}={value!r} is not a "
                               f"{PARAMS[name][key].__name__}") from None
    return name, kwargs


def make_graph(spec: str) -> Graph:
    """Generate or load the graph of ``spec`` (call on the root only)."""
    from ..data.generators import random_graph, rmat, sbm

    name, kw = parse_spec(spec)
    if name == "file":
        from ..data.loaders import load_graph

        return load_graph(kw["path"])
    if name == "csbm":
        from ..data.csbm import csbm

        return csbm(**kw)
    if name == "rmat":
        if "scale" not in kw:
            raise SpmmgnnError(f"graph {spec!r}: rmat needs scale=")
        return Graph(adj=rmat(**kw), name=spec)
    if "n" not in kw:
        raise SpmmgnnError(f"graph {spec!r}: {name} needs n=")
    if name == "sbm":
        return Graph(adj=sbm(**kw), name=spec)
    kw.setdefault("avg_degree", 16.0)
    return Graph(adj=random_graph(**kw), name=spec)


def features_for(n: int, f: int, seed: int, dtype) -> np.ndarray:
    """The dense input of a bare SpMM run: seeded standard normal, n x f."""
    return np.random.default_rng(seed).standard_normal((n, f)).astype(dtype)
