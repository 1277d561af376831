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
from pathlib import Path

import numpy as np
import torch
from mpi4py import MPI

from ..atomic import atomic_path
from ..errors import SpmmgnnError, agree

FORMAT = "spmmgnn-checkpoint-1"


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
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        np.savez(fh, **arrays)


def _json_default(o):
    if isinstance(o, (np.integer, np.floating)):
        return o.item()
    if isinstance(o, (tuple, set)):
        return list(o)
    raise TypeError(f"cannot store {type(o).__name__} in a checkpoint")


def read_checkpoint(path) -> tuple[dict, dict]:
    """(meta, arrays) of a checkpoint file; SpmmgnnError if missing or malformed."""
    p = Path(path)
    if not p.is_file():
        raise SpmmgnnError(f"checkpoint {path} does not exist")
    try:
        with np.load(p, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        meta = json.loads(str(arrays.pop("meta")))
    except (OSError, ValueError, KeyError) as exc:
        raise SpmmgnnError(f"checkpoint {path} is not readable: {exc}") from None
    if meta.get("format") != FORMAT:
        raise SpmmgnnError(f"{path} is not a spmmgnn checkpoint ({meta.get('format')!r})")
    return meta, arrays


def load_checkpoint(path, comm: MPI.Comm, root: int = 0) -> tuple[dict, dict]:
    """Collective: root reads the file, every rank gets (meta, arrays)."""
    got, error = None, None
    if comm.Get_rank() == root:
        try:
            got = read_checkpoint(path)
        except SpmmgnnError as exc:
            error = str(exc)
    agree(comm, error)
    return comm.bcast(got, root=root) if comm.Get_size() > 1 else got


def restore(model, optimizer, meta: dict, arrays: dict) -> None:
    """Load parameters and optimizer state from checkpoint arrays."""
    params = {k.removeprefix("param/"): torch.from_numpy(np.array(v))
              for k, v in arrays.items() if k.startswith("param/")}
    missing = set(model.state_dict()) ^ set(params)
    if missing:
        raise SpmmgnnError(f"checkpoint parameters do not match the model: {sorted(missing)}")
    model.load_state_dict(params)
    state: dict = {}
    for k, v in arrays.items():
        if k.startswith("opt/"):
            _, i, key = k.split("/", 2)
            state.setdefault(int(i), {})[key] = torch.from_numpy(np.array(v))
    current = optimizer.state_dict()
    groups = []
    for g, saved in zip(current["param_groups"], meta["param_groups"], strict=True):
        merged = dict(g)
        merged.update({k: tuple(v) if k == "betas" else v for k, v in saved.items()})
        groups.append(merged)
    optimizer.load_state_dict({"state": state, "param_groups": groups})
