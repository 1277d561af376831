"""Every rank agrees on the whole run before any work, in one collective.

An MPI job trusts each rank's own copy of its settings. When the copies differ (an MPMD
launch ``mpiexec -n 1 spmmgnn train A : -n 1 spmmgnn train B``, a wrapper that reads
per-rank variables, library code that builds ``TrainConfig(seed=rank)``), the ranks enter
different collectives and hang, end in an MPI size mismatch, or silently train different
"replicated" weights. ``agree_on`` compares the settings once, before they are used:

- each rank writes its settings as canonical JSON and hashes them into a 16-byte digest;
- one ``Allgather`` of the digests (16 bytes a rank) tells every rank whether all are equal;
- only when they differ, every rank's settings are gathered (``wire``: JSON, no pickle) and
  every rank raises the same ``collective_error`` naming each setting that differs and each
  rank's value: ``the ranks disagree on the run: --epochs is 3 on rank 0 and 4 on rank 1``.

What is agreed, each where it is read: the command line (the sub-command and every parsed
argument, ``spmmgnn.cli``), ``RunSpec`` (``run_training``), ``TrainConfig`` (``Trainer``),
an operator's construction arguments (``DistSpMM``'s constructors), a grid's (``ProcessGrid``)
and the environment settings that change which collectives run (``environment``). Not
agreed (``PER_RANK``): what acts on one rank only, rank 0's printing (``--quiet``,
``progress``); the thread counts of ``$SPMMGNN_THREADS`` / ``$SPMMGNN_BUSY_CORES`` (each rank
sizes its own share of its node) are never part of the settings.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any

import numpy as np
from mpi4py import MPI

from .errors import collective_error
from .settings import PERSISTENT, persistent_setting
from .wire import allgather_json

DIGEST_BYTES = 16
SHOWN = 4  # differing settings named in one message; the rest are counted
PER_RANK = frozenset({"quiet", "progress"})  # rank 0's printing only: never compared
UNSET = object()


def environment() -> dict[str, str]:
    """The environment settings that change which collectives a rank enters, as they act:
    ``$SPMMGNN_PERSISTENT`` (persistent collectives or plain ones: the two never match).
    ``$SPMMGNN_CUDA_AWARE_MPI`` is agreed where it is read (``staging.cuda_aware``: the
    ranks' minimum); kernel and thread settings act on one rank's local work only."""
    return {f"${PERSISTENT}": persistent_setting()}


def canonical(value: Any) -> Any:
    """``value`` as plain JSON the same on every rank that holds the same setting: tuples
    as lists, paths as text, numpy scalars as numbers, arrays and tensors by shape and
    dtype, other objects by their ``repr`` (or type name, when the repr shows an address)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Mapping):
        return {str(k): canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    if isinstance(value, PurePath):
        return str(value)
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is not None and dtype is not None:
        return f"<{type(value).__name__} {tuple(shape)} {dtype}>"
    text = repr(value)
    return f"<{type(value).__qualname__}>" if " at 0x" in text else text


def per_rank(name: str) -> bool:
    """Whether a setting acts on one rank only (``--quiet``, ``TrainConfig.progress``)."""
    return name.lstrip("-").rpartition(".")[2].replace("-", "_") in PER_RANK


def digest(settings: dict) -> bytes:
    """16 bytes of BLAKE2b over the settings' canonical JSON (keys sorted)."""
    text = json.dumps(settings, sort_keys=True, separators=(",", ":"))
    return hashlib.blake2b(text.encode(), digest_size=DIGEST_BYTES).digest()


def agree_on(comm: MPI.Comm, settings: Mapping[str, Any], subject: str = "the run") -> None:
    """Collective over ``comm``: return when every rank passed the same ``settings`` (names
    to values), else raise one ``SpmmgnnError`` on every rank naming each setting that
    differs and each rank's value. ``subject`` names what is agreed on ("the run", "the
    operator"); ranks agreeing on different subjects at the same point are a difference
    too. Settings named in ``PER_RANK`` are left out. One ``Allgather`` of 16 bytes a rank
    when they agree."""
    if comm.Get_size() == 1:
        return
    plain = {"": subject}
    plain.update((str(k), canonical(v)) for k, v in settings.items() if not per_rank(k))
    every = np.empty((comm.Get_size(), DIGEST_BYTES), dtype=np.uint8)
    comm.Allgather(np.frombuffer(digest(plain), dtype=np.uint8), every)
    if (every == every[0]).all():
        return
    raise collective_error(disagreement(allgather_json(comm, plain)))


def disagreement(every: list[dict]) -> str:
    """The message for ranks whose settings (``every``: each rank's, in rank order, the
    subject under the key "") differ: the differing settings in rank 0's order, each with
    its values and the ranks holding them. When the ranks' first settings differ and they
    name different settings (another sub-command), only the first is named."""
    subjects = [s.get("") for s in every]
    if len(set(subjects)) > 1:
        return ("the ranks are at different steps, agreeing on "
                + _spread(subjects, str) + "; every rank must make the same calls")
    names = list(every[0])
    names += [k for s in every[1:] for k in s if k not in names]
    differ = [k for k in names if k and len({_key(s.get(k, UNSET)) for s in every}) > 1]
    if differ and differ[0] == names[1] and len({tuple(s) for s in every}) > 1:
        differ = differ[:1]  # (another sub-command: its other settings are not comparable)
    parts = [f"{k} is {_spread([s.get(k, UNSET) for s in every])}" for k in differ[:SHOWN]]
    more = len(differ) - SHOWN
    return (f"the ranks disagree on {subjects[0]}: " + "; ".join(parts)
            + (f"; and {more} more setting(s)" if more > 0 else "")
            + "; every rank must be given the same settings")


def _key(value) -> str:
    return "\0unset" if value is UNSET else json.dumps(value, sort_keys=True)


def _spread(values: list, show=None) -> str:
    """``3 on rank 0 and 4 on ranks 1-3``: each distinct value once, with its ranks."""
    groups: dict[str, tuple[Any, list[int]]] = {}
    for r, v in enumerate(values):
        groups.setdefault(_key(v), (v, []))[1].append(r)
    pieces = [f"{(show or _show)(v)} on {_ranks(rs)}" for v, rs in groups.values()]
    return pieces[0] if len(pieces) == 1 else ", ".join(pieces[:-1]) + " and " + pieces[-1]


def _show(value) -> str:
    """A value as the user wrote it: text bare, lists bracketed, unset as such."""
    if value is UNSET:
        return "unset"
    if isinstance(value, str):
        return value if value and value.strip() == value and " " not in value else repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    return json.dumps(value) if isinstance(value, dict) else repr(value)


def _ranks(ranks: list[int]) -> str:
    """``rank 3``, ``ranks 0-2``, ``ranks 0, 2 and 5`` (runs of 3 or more consecutive
    ranks as a range; at most 8 pieces, then how many more)."""
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    runs: list[list[int]] = []
    for r in ranks:
        if runs and r == runs[-1][-1] + 1:
            runs[-1].append(r)
        else:
            runs.append([r])
    pieces = [p for run in runs for p in ([f"{run[0]}-{run[-1]}"] if len(run) > 2
                                          else map(str, run))]
    if len(pieces) > 8:
        listed = pieces[:8]
        count = len(ranks) - _count(listed)
        return f"ranks {', '.join(listed)} and {count} more"
    if len(pieces) == 1:
        return f"ranks {pieces[0]}"
    return f"ranks {', '.join(pieces[:-1])} and {pieces[-1]}"


def _count(pieces: list[str]) -> int:
    """How many ranks ``pieces`` (``3``, ``0-2``) name."""
    total = 0
    for p in pieces:
        lo, _, hi = p.partition("-")
        total += int(hi or lo) - int(lo) + 1
    return total
