"""Train / validation / test splits: a split the user gives is never discarded.

The policy, the same on every path (an in-memory ``Graph``, PyG data, OGB folders, HDF5 block
rows, and the files ``spmmgnn datasets`` / ``partition`` write):

- **all three parts given**: used as given; they must be disjoint.
- **none given**: every labelled vertex joins train, val or test with probabilities 0.6 / 0.2 /
  0.2, decided by a hash of (seed, vertex id in the source graph). The hash needs no global
  array, so each rank draws its own rows and the split is the same at any P, partition or
  path (in memory or block rows of a file).
- **some given**: the given parts are kept as they are; the missing parts are drawn the same
  way, but only from labelled vertices outside every given part, in proportion to their
  default fractions (train given, val and test missing: half and half of the rest).

Vertices without a label (-1) are never scored: they are left out of every part (a given
part that lists some is reported in the note). ``complete_split`` works on any subset of the
rows (one rank's), so it is the same code on root and on every rank.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..local.hashing import uniform_by_id
from ..runtime.errors import SpmmgnnError

SPLITS = ("train", "val", "test")
FRACTIONS = {"train": 0.6, "val": 0.2, "test": 0.2}
SPLIT_SEED_SALT = 0x5D11  # keeps the split's hash stream apart from dropout's and the codecs'


class SplitWarning(UserWarning):
    """Some part of the split was drawn, not given (printed once, by rank 0)."""


@dataclass
class SplitPlan:
    """Which parts the data gives (the same on every rank) and the seed of the draw."""

    given: tuple[str, ...]
    seed: int

    @property
    def drawn(self) -> tuple[str, ...]:
        return tuple(s for s in SPLITS if s not in self.given)

    def note(self, name: str, unlabelled_in_given: int = 0) -> str | None:
        """The line a user must see when any part was not given (None when all were)."""
        parts = []
        if self.drawn:
            if not self.given:
                parts.append(f"{name}: no train/val/test split given; drew one from the "
                             f"labelled vertices (60/20/20 by a hash of vertex id and seed "
                             f"{self.seed})")
            else:
                share = _shares(self.drawn)
                parts.append(
                    f"{name}: the split gives {', '.join(self.given)} but not "
                    f"{', '.join(self.drawn)}; drew "
                    + " / ".join(f"{s} ({share[s]:.0%})" for s in self.drawn)
                    + f" only from labelled vertices outside {', '.join(self.given)} "
                    f"(hash of vertex id and seed {self.seed})")
        if unlabelled_in_given:
            parts.append(f"{name}: {unlabelled_in_given} vertices of the given split have no "
                         "label and are not scored")
        return "; ".join(parts) or None


def _shares(drawn: tuple[str, ...]) -> dict[str, float]:
    total = sum(FRACTIONS[s] for s in drawn)
    return {s: FRACTIONS[s] / total for s in drawn}


def complete_split(vertex_ids: np.ndarray, labels: np.ndarray, given: dict[str, np.ndarray],
                   seed: int) -> tuple[dict[str, np.ndarray], int]:
    """All three masks for these rows, and how many given-part rows have no label.

    ``given`` holds the parts the data provides (boolean, one entry per row); the others are
    drawn per vertex id as the module docstring says. Every returned mask is restricted to
    labelled rows. Overlaps of given parts are left for ``split_overlaps`` to report.
    """
    labelled = np.asarray(labels) >= 0
    n = labelled.shape[0]
    masks = {s: np.asarray(given[s], dtype=bool).reshape(-1) for s in SPLITS if s in given}
    for s, m in masks.items():
        if m.shape != (n,):
            raise SpmmgnnError(f"split {s!r} has {m.shape[0]} entries for {n} vertices")
    unlabelled = int(np.count_nonzero(np.logical_or.reduce(
        [m & ~labelled for m in masks.values()]))) if masks else 0
    drawn = [s for s in SPLITS if s not in masks]
    if drawn:
        free = labelled.copy()
        for m in masks.values():
            free &= ~m
        u = uniform_by_id(np.asarray(vertex_ids, dtype=np.int64), seed ^ SPLIT_SEED_SALT)
        share = _shares(tuple(drawn))
        lo = 0.0
        for i, s in enumerate(drawn):
            hi = 1.0 if i == len(drawn) - 1 else lo + share[s]
            masks[s] = free & (u >= lo) & (u < hi)
            lo = hi
    return {s: masks[s] & labelled for s in SPLITS}, unlabelled


def split_overlaps(masks: dict[str, np.ndarray]) -> np.ndarray:
    """Rows shared by (train, val), (train, test), (val, test): three counts."""
    t, v, e = (masks[s] for s in SPLITS)
    return np.array([np.count_nonzero(t & v), np.count_nonzero(t & e),
                     np.count_nonzero(v & e)], dtype=np.int64)


def random_split(n: int, seed: int, fractions=(0.6, 0.2, 0.2),
                 labelled: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Seeded random train/val/test masks with exact fractions of the labelled vertices
    (a permutation of all n: for generators that build the whole graph, such as csbm)."""
    f = np.asarray(fractions, dtype=np.float64)
    if f.shape != (3,) or np.any(f < 0) or f.sum() > 1 + 1e-9:
        raise SpmmgnnError(f"split fractions must be three non-negative numbers summing to "
                           f"at most 1, got {list(fractions)}")
    ids = np.arange(n) if labelled is None else np.flatnonzero(labelled)
    ids = np.random.default_rng(seed).permutation(ids)
    cut = np.floor(np.cumsum(f) * ids.size + 1e-9).astype(np.int64)
    masks = {}
    for name, a, b in zip(SPLITS, np.r_[0, cut[:2]], cut, strict=True):
        m = np.zeros(n, dtype=bool)
        m[ids[a:b]] = True
        masks[name] = m
    return masks
