"""A first compile (an empty numba cache) is announced before the wait, once per process,
on rank 0, by every kernel numba compiles (``jit.watch_compiles``), in the commands and the
library alike; and ``default``'s time rule does not count the compile against its budget
(``partitioners.api.warm_kernels``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import scipy.io
import scipy.sparse as sp

from spmmgnn import jit
from spmmgnn.runtime.jit import COMPILE_NOTICE


def test_a_kernel_numba_compiles_announces_it_once(capsys, monkeypatch):
    """A kernel with no cache (numba compiles it in every process) and a second one: one
    notice, before the first compile, with the prefix the command line sets."""
    monkeypatch.setitem(jit._notice, "shown", False)
    monkeypatch.setitem(jit._notice, "prefix", "spmmgnn probe")

    @jit.eager_njit(cache=False)
    def twice(x):
        return 2 * x

    @jit.eager_njit(cache=False)
    def thrice(x):
        return 3 * x

    assert capsys.readouterr().err == ""  # made, not compiled yet
    assert twice(2) == 4 and thrice(2) == 6 and twice(3) == 6
    assert capsys.readouterr().err == f"spmmgnn probe: {COMPILE_NOTICE}\n"


@pytest.mark.slow
def test_partition_on_an_empty_cache_announces_and_keeps_its_budget(tmp_path):
    """``spmmgnn partition`` with ``default`` (the README's snippet) on an empty numba cache:
    the notice is the first line on stderr, and the partition's seconds (what the time rule
    reads) leave out the compile before them; with the cache filled, no notice."""
    B = sp.random(3000, 3000, density=8 / 3000, random_state=0, format="csr")
    scipy.io.mmwrite(tmp_path / "g.mtx", B + B.T)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"), SPMMGNN_THREADS="1")
    argv = [sys.executable, "-m", "spmmgnn.cli", "partition", str(tmp_path / "g.mtx"), "-k",
            "4", "-o", str(tmp_path / "p.h5"), "--json", str(tmp_path / "m.json")]
    t = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=1800, env=env)
    wall = time.monotonic() - t
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.splitlines()[0] == f"spmmgnn partition: {COMPILE_NOTICE}", proc.stderr
    assert proc.stderr.count(COMPILE_NOTICE) == 1
    seconds = json.loads((tmp_path / "m.json").read_text())["seconds"]
    assert seconds < wall / 3, (seconds, wall)  # the compile took the rest
    again = subprocess.run(argv, capture_output=True, text=True, timeout=900, env=env)
    assert again.returncode == 0 and COMPILE_NOTICE not in again.stderr, again.stderr[-3000:]
