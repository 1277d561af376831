"""Random numbers keyed by global vertex id, so every rank, partition and replica agrees."""

from __future__ import annotations

import numpy as np


def uniform_by_id(ids: np.ndarray, seed: int) -> np.ndarray:
    """A uniform value in [0, 1) per id: splitmix64 of (seed, id), vectorized."""
    with np.errstate(over="ignore"):
        z = np.asarray(ids).astype(np.uint64) ^ np.uint64(
            (int(seed) * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF)
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
    return (z >> np.uint64(11)).astype(np.float64) * (1.0 / 2**53)
