"""Shared helpers for the benchmarks: timing, machine facts and atomic JSON output."""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

from spmmgnn.runtime.atomic import write_text_atomic

RESULTS = Path(__file__).parent / "results"


def best_time(fn, repeat: int = 5, warmup: int = 1) -> dict:
    """Run ``fn`` warmup + repeat times; return min and median seconds."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return dict(min=float(min(times)), median=float(np.median(times)))


def copy_bandwidth(mbytes: int = 256) -> float:
    """Streaming copy bandwidth in GB/s (bytes read + written), one thread, numpy."""
    src = np.ones(mbytes * 2**20 // 4, dtype=np.float32)
    dst = np.empty_like(src)
    t = best_time(lambda: np.copyto(dst, src), repeat=5)["min"]
    return 2 * src.nbytes / t / 1e9


def mpiexec() -> str:
    """This environment's mpiexec (the mpich wheel puts it next to python), else the PATH's."""
    local = Path(sys.executable).parent / "mpiexec"
    return str(local) if local.exists() else "mpiexec"


def machine() -> dict:
    return dict(platform=platform.platform(), processor=platform.processor(),
                cores=len(os.sched_getaffinity(0)), python=platform.python_version())


def write_json(path: str | Path, payload: dict) -> Path:
    path = Path(path)
    write_text_atomic(path, json.dumps(payload, indent=2))
    return path


def pyplot():
    """matplotlib.pyplot with a file-only backend, or None when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt
