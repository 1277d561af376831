"""How a local product picks its kernel: a setting (``$SPMMGNN_KERNEL``, ``$SPMMGNN_KERNEL_T``
or the block's own), the cache model's rule, or timing the candidates on the real operands
once per (width, dtype, threads) (inspector-executor); ``Choice`` records what ran and why."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import numpy as np

from ..runtime.errors import SpmmgnnError


@dataclass
class Choice:
    """The kernel variant one (width, dtype, threads) runs, and why."""

    variant: str
    source: str                         # "measured", "rule" or "forced"
    seconds: dict[str, float] | None = None   # per candidate, scaled to the whole matrix
    sample: float = 1.0                 # share of the non-zeros the timed calls ran


SERIAL_TWINS = ("plain", "unrolled", "vector")  # the variants with a serial kernel
MATMUL_SETTINGS = ("auto", "rule", "plain", "unrolled", "blocked", "vector")
TRANSPOSE_SETTINGS = ("auto", "rule", "transpose", "scan")
MEASURE_MIN_WORK = 1 << 21  # non-zeros x columns below which a call takes ~1 ms: use the rule
SAMPLE_WORK = 1 << 25  # non-zeros x columns of a timed call on a row sample (~10-20 ms)
SAMPLE_WINDOWS = 16  # evenly spaced runs of rows in a sample
BLOCK_MIN_DEGREE = 2  # average non-zeros per row and column block that blocking needs
HOT_SHARE_MAX = 0.5  # unblocked when the columns a quarter LLC holds carry this share of nnz


def kernel_setting(value: str | None, env: str, allowed: tuple[str, ...]) -> str:
    """The kernel setting: the attribute, else the environment variable, else ``auto``."""
    setting = (value or os.environ.get(env, "") or "auto").strip().lower()
    ok = setting in allowed or (
        "blocked" in allowed and setting.startswith("blocked:") and setting[8:].isdigit()
        and int(setting[8:]) >= 1)
    if not ok:
        raise SpmmgnnError(f"kernel setting {setting!r} ({env}): choose one of "
                           f"{', '.join(allowed)}" + (", blocked:N" if "blocked" in allowed
                                                      else ""))
    return setting


def time_candidates(variants: list[str], run, shape: tuple[int, int], dtype) -> dict:
    """Seconds of each variant writing a scratch array (every variant gives the same
    numbers): each once, then the two fastest twice more, interleaved, keeping each one's
    minimum, so a choice costs about ``len(variants) + 4`` calls and one disturbed timing
    cannot decide it."""
    scratch = np.empty(shape, dtype=dtype)
    seconds = {}
    for v in variants:
        t0 = time.perf_counter()
        run(v, scratch)
        seconds[v] = time.perf_counter() - t0
    finalists = sorted(seconds, key=seconds.get)[:2]
    for _ in range(2):
        for v in finalists:
            t0 = time.perf_counter()
            run(v, scratch)
            seconds[v] = min(seconds[v], time.perf_counter() - t0)
    return seconds
