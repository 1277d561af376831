"""Training checkpoints without pickle: one ``.npz`` of plain arrays, written atomically.

Content: ``meta`` (a JSON string: epoch, history, the run's signature, optimizer
hyper-parameters), ``param/<name>`` for every model parameter, and ``opt/<i>/<key>`` for the
optimizer state of parameter i (Adam: ``step``, ``exp_avg``, ``exp_avg_sq``). Loading uses
``allow_pickle=False``. Rank 0 writes (weights are replicated) through a temporary file that
replaces the target only once complete, so a crash never leaves a torn checkpoint; on resume
rank 0 reads and broadcasts, so other nodes need not see the file.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import torch
from mpi4py import MPI

from ..data.limits import NpzError, read_npz
from ..runtime.atomic import atomic_path
from ..runtime.errors import SpmmgnnError, agree
from ..runtime.wire import bcast_array, bcast_json

FORMAT = "spmmgnn-checkpoint-2"  # 2: the signature holds the data fingerprint
OLD_FORMATS = ("spmmgnn-checkpoint-1",)
FINGERPRINT_NAMES = dict(features="the features", labels="the labels", split="the split",
                         structure="the graph structure")


def state_arrays(model: torch.nn.Module, optimizer) -> dict:
    """Model parameters and optimizer state as numpy arrays (names as in the file)."""
    arrays = {f"param/{k}": v.detach().cpu().numpy().copy()
              for k, v in model.state_dict().items()}
    opt = optimizer.state_dict()
    for i, st in opt["state"].items():
        for key, val in st.items():
            arrays[f"opt/{i}/{key}"] = (val.detach().cpu().numpy().copy()
                                        if torch.is_tensor(val) else np.asarray(val))
    return arrays


def save_checkpoint(path, model, optimizer, epoch: int, history: list, signature: dict) -> None:
    """Write a checkpoint atomically (call on one rank)."""
    groups = [{k: v for k, v in g.items() if k != "params"}
              for g in optimizer.state_dict()["param_groups"]]
    meta = dict(format=FORMAT, epoch=int(epoch), history=history, signature=signature,
                param_groups=groups)
    arrays = state_arrays(model, optimizer)
    arrays["meta"] = np.array(json.dumps(meta, default=_json_default))
    size = sum(a.nbytes + 256 for a in arrays.values()) + 2**16  # + .npy and zip headers
    with atomic_path(path, "checkpoint", size=size) as tmp, open(tmp, "wb") as fh:
        np.savez(fh, **arrays)


def _json_default(o):
    if isinstance(o, (np.integer, np.floating)):
        return o.item()
    if isinstance(o, (tuple, set)):
        return list(o)
    raise TypeError(f"cannot store {type(o).__name__} in a checkpoint")


def read_checkpoint(path, max_bytes: int | None = None) -> tuple[dict, dict]:
    """(meta, arrays) of a checkpoint file; SpmmgnnError if missing, truncated, malformed or
    holding NaN / Inf (a checkpoint of a diverged run is not a starting point). ``max_bytes``:
    what its arrays but ``meta`` may declare (a model's parameters and optimizer state); a
    file declaring more is refused before it is read."""
    arrays = _read(path, max_bytes=max_bytes)
    meta = _meta(path, arrays.pop("meta", None))
    if not isinstance(meta, dict) or meta.get("format") in OLD_FORMATS:
        found = meta.get("format") if isinstance(meta, dict) else None
        raise SpmmgnnError(f"{path} is not a {FORMAT} file ({found!r})"
                           + ("; it was written by an older spmmgnn without a data "
                              "fingerprint: start a new run" if found in OLD_FORMATS else ""))
    if meta.get("format") != FORMAT:
        raise SpmmgnnError(f"{path} is not a spmmgnn checkpoint ({meta.get('format')!r})")
    _check_meta(path, meta)
    for k, v in arrays.items():
        if v.dtype.kind not in "biuf":
            raise SpmmgnnError(f"checkpoint {path}: {k} is not numeric ({v.dtype})")
        if v.dtype.kind == "f" and not np.all(np.isfinite(v)):
            raise SpmmgnnError(f"checkpoint {path} holds NaN or Inf in {k}: it was written by "
                               "a run that diverged; resume from an earlier checkpoint")
    return meta, arrays


def _read(path, names: tuple[str, ...] | None = None, max_bytes: int | None = None) -> dict:
    """The arrays of a checkpoint file, bounded (``data.limits.read_npz``)."""
    if not Path(path).exists():
        raise SpmmgnnError(f"checkpoint {path} does not exist")
    try:
        return read_npz(path, "checkpoint", names, max_bytes, unbounded=("meta",))
    except NpzError as exc:
        raise SpmmgnnError(f"checkpoint {path} is not readable (truncated or not a "
                           f"checkpoint): {exc}") from None


def _meta(path, meta):
    """The decoded ``meta`` member (any JSON value)."""
    try:
        if meta is None or meta.dtype.kind not in "US" or meta.ndim != 0:
            raise ValueError("no meta string")
        return json.loads(str(meta))
    except (ValueError, RecursionError) as exc:
        raise SpmmgnnError(f"checkpoint {path} is not readable (truncated or not a "
                           f"checkpoint): {type(exc).__name__}: {exc}") from None


def read_meta(path) -> dict:
    """Only the ``meta`` of a checkpoint (its signature, epoch and history): SpmmgnnError if
    the file is not a readable checkpoint of this format."""
    meta = _meta(path, _read(path, ("meta",)).get("meta"))
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise SpmmgnnError(f"{path} is not a {FORMAT} file")
    _check_meta(path, meta)
    return meta


def _check_meta(path, meta: dict) -> None:
    """The keys ``restore`` and ``Trainer`` read, with their types."""
    want = dict(epoch=int, history=list, signature=dict, param_groups=list)
    for key, kind in want.items():
        if not isinstance(meta.get(key), kind) or isinstance(meta.get(key), bool):
            raise SpmmgnnError(f"checkpoint {path}: meta.{key} is missing or not a "
                               f"{kind.__name__}")
    if meta["epoch"] < 0 or not all(isinstance(g, dict) for g in meta["param_groups"]):
        raise SpmmgnnError(f"checkpoint {path}: malformed meta (epoch or param_groups)")
    numbers = [v for g in meta["param_groups"] for v in g.values() if isinstance(v, float)]
    if not all(math.isfinite(v) for v in numbers):
        raise SpmmgnnError(f"checkpoint {path}: the optimizer's settings hold NaN or Inf")
    for g in meta["param_groups"]:  # what Adam will apply is what the signature promises
        for key in ("lr", "weight_decay"):
            if key in g and key in meta["signature"] and g[key] != meta["signature"][key]:
                raise SpmmgnnError(f"checkpoint {path}: the optimizer state's {key} "
                                   f"{g[key]!r} differs from the run's {key} "
                                   f"{meta['signature'][key]!r} (an edited or corrupt file)")
    if not all(isinstance(r, dict) and isinstance(r.get("epoch"), int)
               for r in meta["history"]):
        raise SpmmgnnError(f"checkpoint {path}: malformed meta.history")


def signature_diff(saved: dict, mine: dict) -> list[str]:
    """What differs between a checkpoint's signature and this run's, one phrase each; the
    data fingerprint is named part by part ("the labels differ")."""
    out = []
    for k in sorted(set(saved) | set(mine)):
        a, b = saved.get(k), mine.get(k)
        if a == b:
            continue
        if k == "data" and isinstance(a, dict) and isinstance(b, dict):
            parts = [FINGERPRINT_NAMES.get(p, p) for p in sorted(set(a) | set(b))
                     if a.get(p) != b.get(p)]
            out.append(f"{', '.join(parts)} differ (same sizes, other values)")
        else:
            out.append(f"{k} {a!r} != {b!r}")
    return out


def state_bytes(model: torch.nn.Module) -> int:
    """At most what a checkpoint of ``model`` holds besides its meta: each parameter and
    Adam's two moments in float64, a step counter per parameter, 64 KiB of slack."""
    params = list(model.parameters())
    return 3 * 8 * sum(p.numel() for p in params) + 64 * len(params) + 2**16


def load_checkpoint(path, comm: MPI.Comm, root: int = 0,
                    max_bytes: int | None = None) -> tuple[dict, dict]:
    """Collective: root reads the file, every rank gets (meta, arrays): the meta as JSON,
    each array by its buffer (``wire``; no pickle)."""
    got, error = None, None
    if comm.Get_rank() == root:
        try:
            got = read_checkpoint(path, max_bytes)
        except SpmmgnnError as exc:
            error = str(exc)
    agree(comm, error)
    if comm.Get_size() == 1:
        return got
    mine = comm.Get_rank() == root
    meta = bcast_json(comm, got[0] if mine else None, root)
    names = bcast_json(comm, sorted(got[1]) if mine else None, root)
    arrays = {k: bcast_array(comm, got[1][k] if mine else None, root) for k in names}
    return meta, arrays


def restore(model, optimizer, meta: dict, arrays: dict) -> None:
    """Load parameters and optimizer state from checkpoint arrays (SpmmgnnError when they do
    not fit the model)."""
    try:
        _restore(model, optimizer, meta, arrays)
    except (RuntimeError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise SpmmgnnError(f"checkpoint parameters do not fit the model: "
                           f"{type(exc).__name__}: {str(exc).splitlines()[0]}") from None


def _check_shapes(model, optimizer, params: dict, state: dict) -> None:
    """SpmmgnnError naming the first parameter, or optimizer state of one, whose shape in
    the checkpoint differs from the model's, with both shapes (torch's own error names
    neither; the optimizer would reshape a moment of the right size silently)."""
    mine = model.state_dict()
    for name, saved in params.items():
        if tuple(saved.shape) != tuple(mine[name].shape):
            raise SpmmgnnError(f"checkpoint parameters do not fit the model: param/{name} has "
                               f"shape {tuple(saved.shape)} in the checkpoint and "
                               f"{tuple(mine[name].shape)} in the model")
    names = {id(p): n for n, p in model.named_parameters()}
    ordered = list(getattr(optimizer, "params", None)
                   or [p for g in optimizer.param_groups for p in g["params"]])
    for i, st in sorted(state.items()):
        if not 0 <= i < len(ordered):
            raise SpmmgnnError(f"checkpoint parameters do not fit the model: opt/{i} is the "
                               f"state of parameter {i}, the model has {len(ordered)}")
        p = ordered[i]
        for key, saved in st.items():
            want = () if key == "step" else tuple(p.shape)
            if tuple(saved.shape) != want:
                raise SpmmgnnError(f"checkpoint parameters do not fit the model: opt/{i}/{key}"
                                   f" (of {names.get(id(p), f'parameter {i}')}) has shape "
                                   f"{tuple(saved.shape)} in the checkpoint and {want} in "
                                   "the model")


def _restore(model, optimizer, meta: dict, arrays: dict) -> None:
    params = {k.removeprefix("param/"): torch.from_numpy(np.array(v))
              for k, v in arrays.items() if k.startswith("param/")}
    missing = set(model.state_dict()) ^ set(params)
    if missing:
        raise SpmmgnnError(f"checkpoint parameters do not match the model: {sorted(missing)}")
    state: dict = {}
    for k, v in arrays.items():
        if k.startswith("opt/"):
            _, i, key = k.split("/", 2)
            state.setdefault(int(i), {})[key] = torch.from_numpy(np.array(v))
    _check_shapes(model, optimizer, params, state)
    model.load_state_dict(params)
    current = optimizer.state_dict()
    groups = []
    for g, saved in zip(current["param_groups"], meta["param_groups"], strict=True):
        merged = dict(g)
        merged.update({k: tuple(v) if k == "betas" else v for k, v in saved.items()})
        groups.append(merged)
    optimizer.load_state_dict({"state": state, "param_groups": groups})
