"""What a sweep runs and what it has already run.

A sweep is the product graphs x modes x algorithms x c x partitioners x codecs x widths,
less the combinations that cannot run (c not dividing P, a 1D algorithm with c > 1, a codec
on an algorithm without one). Each run has a ``run_id``: a hash of its exact configuration
and P, so a restarted sweep skips the runs whose line is already in the results file (the
file is only ever appended to, one JSON object per line).
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from ..errors import SpmmgnnError

MODES = ("spmm", "train")


@dataclass
class SweepConfig:
    graphs: list[str] = field(default_factory=lambda: ["rmat:scale=14,edge_factor=8"])
    modes: list[str] = field(default_factory=lambda: ["spmm"])
    algorithms: list[str] = field(default_factory=lambda: ["oblivious1d", "sparse1d"])
    replication: list[int] = field(default_factory=lambda: [1])
    partitioners: list[str] = field(default_factory=lambda: ["none"])
    codecs: list[str] = field(default_factory=lambda: ["none"])
    features: list[int] = field(default_factory=lambda: [64])
    repeat: int = 10
    epochs: int = 20
    layers: int = 2
    cache: bool = True            # first-layer aggregation cache (train mode), in every run
    dtype: str = "float32"
    seed: int = 0

    @classmethod
    def from_toml(cls, path: str) -> dict:
        """The keys of a TOML file (its top level or its [sweep] table), checked."""
        try:
            import tomllib
        except ImportError:  # Python 3.10
            raise SpmmgnnError("TOML sweep files need Python >= 3.11 (tomllib)") from None
        try:
            with open(path, "rb") as fh:
                data = tomllib.load(fh)
        except OSError as exc:
            raise SpmmgnnError(f"cannot read {path}: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise SpmmgnnError(f"{path}: not valid TOML: {exc}") from None
        data = data.get("sweep", data)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise SpmmgnnError(f"{path}: unknown keys {unknown}; known: {sorted(known)}")
        return data

    def check(self) -> SweepConfig:
        from ..algorithms import ALGORITHMS
        from ..codecs import get_codec
        from .graphs import parse_spec

        for key in ("graphs", "modes", "algorithms", "replication", "partitioners", "codecs",
                    "features"):
            value = getattr(self, key)
            if isinstance(value, (str, int)):
                setattr(self, key, [value])
            if not getattr(self, key):
                raise SpmmgnnError(f"sweep: {key} is empty")
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
        if any(int(c) < 1 for c in self.replication) or any(int(f) < 1 for f in self.features):
            raise SpmmgnnError("sweep: replication and features must be positive")
        if self.repeat < 1 or self.epochs < 1 or self.layers < 1:
            raise SpmmgnnError("sweep: repeat, epochs and layers must be positive")
        if self.dtype not in ("float32", "float64"):
            raise SpmmgnnError(f"sweep: dtype must be float32 or float64, got {self.dtype}")
        return self


def runs(cfg: SweepConfig, P: int) -> list[dict]:
    """Every runnable configuration of the sweep at P ranks, in a stable order."""
    from .volumes import CODEC_ALGORITHMS, ONE_D

    out = []
    for graph, mode, algo, c, part, codec, f in itertools.product(
            cfg.graphs, cfg.modes, cfg.algorithms, cfg.replication, cfg.partitioners,
            cfg.codecs, cfg.features):
        c = int(c)
        if P % c or (c > 1 and (algo in ONE_D or algo.endswith("1d"))):
            continue
        if codec != "none" and algo not in CODEC_ALGORITHMS:
            continue
        run = dict(graph=graph, mode=mode, algorithm=algo, P=P, c=c, partitioner=part,
                   codec=codec, f=int(f), dtype=cfg.dtype, seed=cfg.seed)
        if mode == "spmm":
            run["repeat"] = cfg.repeat
        else:
            run.update(epochs=cfg.epochs, layers=cfg.layers, cache=cfg.cache)
        run["run_id"] = run_id(run)
        out.append(run)
    return out


def run_id(run: dict) -> str:
    """Hash of the exact configuration (key order does not matter)."""
    text = json.dumps({k: v for k, v in run.items() if k != "run_id"}, sort_keys=True)
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def done_ids(path: str | Path) -> set[str]:
    """run_ids already recorded in the results file (a missing file: none; a torn last line
    from an interrupted write is ignored)."""
    p = Path(path)
    if not p.exists():
        return set()
    seen = set()
    for line in p.read_text().splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict) and "run_id" in rec:
            seen.add(rec["run_id"])
    return seen


def append_record(path: str | Path, record: dict) -> None:
    """Append one JSON line (never rewrites the file); a torn previous line is closed first."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(record, sort_keys=True) + "\n"
    with open(p, "a+b") as fh:
        fh.seek(0, 2)
        if fh.tell():
            fh.seek(-1, 2)
            if fh.read(1) != b"\n":
                text = "\n" + text
        fh.write(text.encode())
        fh.flush()


def read_records(path: str | Path) -> list[dict]:
    """Every complete JSON line of a results file."""
    p = Path(path)
    if not p.exists():
        raise SpmmgnnError(f"results file {path} does not exist")
    out = []
    for line in p.read_text().splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def as_dict(cfg: SweepConfig) -> dict:
    return asdict(cfg)
