"""What a sweep runs and what it has already run.

A sweep is the product graphs x modes x algorithms x grids x partitioners x codecs x widths,
less the combinations that cannot run (c not dividing P, a 1D algorithm with c > 1, a codec
on an algorithm without one). The grids of an algorithm are its ``replication`` values c (1D
and 1.5D) or the shapes of ``grids`` of its dimension whose product is P (2D and 3D; none
given: the factors of P closest to a square or cube). Each run has a ``run_id``: a hash of its
exact configuration and P, so a restarted sweep skips the runs that already succeeded (see
``records``).
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import asdict, dataclass, field, fields

from ..data.limits import check_input_file
from ..grid import format_shape, parse_grid
from ..runtime.errors import SpmmgnnError, collective_error

MODES = ("spmm", "train")
LIST_KEYS = ("graphs", "modes", "algorithms", "replication", "partitioners", "codecs",
             "features", "grids", "exchanges")
EXCHANGES = ("flat", "node", "auto")


@dataclass
class SweepConfig:
    graphs: list[str] = field(default_factory=lambda: ["rmat:scale=14,edge_factor=8"])
    modes: list[str] = field(default_factory=lambda: ["spmm"])
    algorithms: list[str] = field(default_factory=lambda: ["oblivious1d", "sparse1d"])
    replication: list[int] = field(default_factory=lambda: [1])
    partitioners: list[str] = field(default_factory=lambda: ["none"])
    codecs: list[str] = field(default_factory=lambda: ["none"])
    features: list[int] = field(default_factory=lambda: [64])
    grids: list[str] = field(default_factory=list)   # "2x2", "2x2x2": the 2D/3D algorithms
    # the halo exchanges of the sparse algorithms (the others run "flat" only), and the
    # ranks per node (0: the ranks that share memory)
    exchanges: list[str] = field(default_factory=lambda: ["flat"])
    ranks_per_node: int = 0
    repeat: int = 10
    epochs: int = 20
    layers: int = 2
    cache: bool = True            # first-layer aggregation cache (train mode), in every run
    dtype: str = "float32"
    seed: int = 0
    device: str = "none"          # train mode on a torch device (spmmgnn train --device)
    transport: str = "auto"       # how rows travel: mpi, torch (torch.distributed) or auto
    # train mode in the algorithm's own blocks (spmmgnn train --grid-layout / --plexus-blocks)
    grid_layout: bool = False
    plexus_blocks: int = 0

    @classmethod
    def from_toml(cls, path: str) -> dict:
        """The keys of a TOML file (its top level or its [sweep] table), checked."""
        try:
            import tomllib
        except ImportError:  # Python 3.10
            raise SpmmgnnError("TOML sweep files need Python >= 3.11 (tomllib)") from None
        check_input_file(path, "sweep file", 8)
        try:
            with open(path, "rb") as fh:
                data = tomllib.load(fh)
        except OSError as exc:
            raise SpmmgnnError(f"cannot read {path}: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise SpmmgnnError(f"{path}: not valid TOML: {exc}") from None
        except UnicodeDecodeError as exc:
            raise SpmmgnnError(f"{path}: not a TOML file: not UTF-8 text (byte "
                               f"{exc.start})") from None
        data = data.get("sweep", data)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise SpmmgnnError(f"{path}: unknown keys {unknown}; known: {sorted(known)}")
        return data

    def check(self) -> SweepConfig:
        from ..algorithms import ALGORITHMS
        from ..local.codecs import get_codec
        from .graphs import parse_spec

        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in LIST_KEYS:
                if isinstance(value, (str, int)) and not isinstance(value, bool):
                    value = [value]
                    setattr(self, f.name, value)
                if not isinstance(value, list) or (not value and f.name != "grids"):
                    raise SpmmgnnError(f"sweep: {f.name} must be a non-empty list, got "
                                       f"{value!r}")
                kind = int if f.name in ("replication", "features") else str
                bad = [v for v in value if isinstance(v, bool) or not isinstance(v, kind)]
                if bad:
                    raise SpmmgnnError(f"sweep: {f.name} must hold {kind.__name__}s, got "
                                       f"{bad[0]!r}")
            else:
                kind = type(f.default)
                if type(value) is not kind:
                    raise SpmmgnnError(f"sweep: {f.name} must be a {kind.__name__}, got "
                                       f"{value!r}")
        for g in self.graphs:
            parse_spec(g)
        bad = [a for a in self.algorithms if a not in ALGORITHMS]
        if bad:
            raise SpmmgnnError(f"sweep: unknown algorithms {bad}; choose from "
                               f"{sorted(ALGORITHMS)}")
        if set(self.modes) - set(MODES):
            raise SpmmgnnError(f"sweep: modes must be among {MODES}, got {self.modes}")
        for c in self.codecs:
            get_codec(c)
        try:
            self.grids = [format_shape(parse_grid(g)) for g in self.grids]
        except ValueError as exc:
            raise SpmmgnnError(f"sweep: grids: {exc}") from None
        if min(self.replication) < 1 or min(self.features) < 1:
            raise SpmmgnnError("sweep: replication and features must be positive")
        if self.repeat < 1 or self.epochs < 1 or self.layers < 1:
            raise SpmmgnnError("sweep: repeat, epochs and layers must be positive")
        if set(self.exchanges) - set(EXCHANGES):
            raise SpmmgnnError(f"sweep: exchanges must be among {EXCHANGES}, got "
                               f"{self.exchanges}")
        if self.ranks_per_node < 0:
            raise SpmmgnnError("sweep: ranks_per_node must be positive (0: by shared memory)")
        self._check_device()
        self._check_layout()
        if self.dtype not in ("float32", "float64"):
            raise SpmmgnnError(f"sweep: dtype must be float32 or float64, got {self.dtype}")
        for name in self.partitioners:
            check_partitioner(name)
        if any(not str(g).strip() for g in self.graphs):
            raise SpmmgnnError("sweep: graphs: an empty name; give a spec (rmat:scale=14, "
                               "csbm:n=20000, ...) or a graph file")
        return self


    def _check_device(self) -> None:
        """``device`` names cpu, cuda or cuda:k and runs train mode only (``spmmgnn spmm
        --device`` times the bare product); ``transport`` is mpi, torch or auto."""
        from ..exchange.transport import TRANSPORTS

        if self.transport not in TRANSPORTS:
            raise SpmmgnnError(f"sweep: transport must be one of {', '.join(TRANSPORTS)}, "
                               f"got {self.transport!r}")
        if self.device == "none":
            return
        if self.device.partition(":")[0] not in ("cpu", "cuda"):
            raise SpmmgnnError(f"sweep: device must be none, cpu, cuda or cuda:k, got "
                               f"{self.device!r}")
        if "spmm" in self.modes:
            raise SpmmgnnError("sweep: --device runs the train mode (spmmgnn train --device); "
                               "time the bare product with spmmgnn spmm --device")


    def _check_layout(self) -> None:
        """``grid_layout`` / ``plexus_blocks`` train in the algorithm's blocks: train mode
        only, one of the two, and every algorithm one ``spmmgnn train`` takes them with
        (its own refusal, ``training.run.options_error``)."""
        if not (self.grid_layout or self.plexus_blocks):
            return
        from ..training.run import RunSpec, options_error

        if self.plexus_blocks < 0:
            raise SpmmgnnError(f"sweep: plexus_blocks must be >= 0, got {self.plexus_blocks}")
        if "spmm" in self.modes:
            raise SpmmgnnError("sweep: --grid-layout and --plexus-blocks are training layouts: "
                               "give --mode train (the bare product converts on every call)")
        if self.grid_layout and self.plexus_blocks:
            raise SpmmgnnError("sweep: --grid-layout (oblivious2d/3d) and --plexus-blocks "
                               "(plexus3d) are two algorithms' layouts: give one")
        for algorithm in self.algorithms:
            problem = options_error(RunSpec(algorithm=algorithm, grid_layout=self.grid_layout,
                                            plexus_blocks=self.plexus_blocks))
            if problem:
                raise SpmmgnnError(problem)


def check_partitioner(name: str) -> None:
    """SpmmgnnError now, before any run, for a name no partitioner answers to (else every
    run would fail and record the reason in its JSON only)."""
    from ..partitioners.api import CONTIGUOUS, PRESETS, parse_method

    method = str(name).strip().lower()
    method = method[len("twolevel:"):] if method.startswith("twolevel:") else method
    if method and method not in CONTIGUOUS + PRESETS:
        try:
            parse_method(method)
        except SpmmgnnError as exc:
            raise SpmmgnnError(f"sweep: partitioners: {exc}") from None


def no_runs_error(cfg: SweepConfig, P: int) -> SpmmgnnError:
    """Why a sweep has no run at P ranks (its c values and grids all leave P out); raised
    by every rank together (each computed the same empty list)."""
    grids = f" and grids {' '.join(cfg.grids)}" if cfg.grids else ""
    return collective_error(
        f"the sweep has no run at P = {P} (replication {cfg.replication}{grids} for "
        f"{', '.join(cfg.algorithms)}): give c among the divisors of {P} (1D/1.5D) or grids "
        f"whose product is {P} (2D/3D), or run on another number of ranks")


def runs(cfg: SweepConfig, P: int) -> list[dict]:
    """Every runnable configuration of the sweep at P ranks, in a stable order."""
    from ..algorithms import ALGORITHMS
    from .volumes import CODEC_ALGORITHMS, grid_points

    out = []
    for graph, mode, algo, part, codec, f, exchange in itertools.product(
            cfg.graphs, cfg.modes, cfg.algorithms, cfg.partitioners, cfg.codecs, cfg.features,
            cfg.exchanges):
        if codec != "none" and algo not in CODEC_ALGORITHMS:
            continue
        if exchange != "flat" and not ALGORITHMS[algo].takes_exchange:
            if "flat" in cfg.exchanges:
                continue
            exchange = "flat"  # the oblivious algorithms have only the one exchange
        for c, shape in grid_points(algo, P, cfg.replication, cfg.grids):
            out.append(_run(cfg, graph, mode, algo, P, c, shape and format_shape(shape), part,
                            codec, f, exchange))
    return list({r["run_id"]: r for r in out}.values())


def _run(cfg: SweepConfig, graph: str, mode: str, algo: str, P: int, c: int,
         shape: str | None, part: str, codec: str, f: int, exchange: str = "flat") -> dict:
    """One run's configuration, with its ``run_id`` (the 1D/1.5D runs carry no grid key,
    and the flat exchange on nodes by shared memory no exchange or nodes key, so their ids
    are those of earlier sweeps)."""
    run = dict(graph=graph, mode=mode, algorithm=algo, P=P, c=c, partitioner=part,
               codec=codec, f=int(f), dtype=cfg.dtype, seed=cfg.seed)
    if shape is not None:
        run["grid"] = shape
    if exchange != "flat":
        run["exchange"] = exchange
    if cfg.ranks_per_node:
        run["ranks_per_node"] = cfg.ranks_per_node
    if cfg.device != "none":  # (runs without a device keep their earlier ids)
        run["device"] = cfg.device
    if cfg.transport != "auto":  # (so do runs on the default transport)
        run["transport"] = cfg.transport
    if mode == "spmm":
        run["repeat"] = cfg.repeat
    else:
        run.update(epochs=cfg.epochs, layers=cfg.layers, cache=cfg.cache)
        if cfg.grid_layout:   # (row-layout runs keep their earlier ids)
            run["grid_layout"] = True
        if cfg.plexus_blocks:
            run["plexus_blocks"] = cfg.plexus_blocks
    run["run_id"] = run_id(run)
    return run


def run_id(run: dict) -> str:
    """Hash of the exact configuration (key order does not matter)."""
    text = json.dumps({k: v for k, v in run.items() if k != "run_id"}, sort_keys=True)
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def as_dict(cfg: SweepConfig) -> dict:
    return asdict(cfg)
