"""Default threads per rank from the affinity sets of the ranks on a node; the threads run
while other work keeps cores busy."""

from __future__ import annotations

import os

import numpy as np
import pytest

from spmmgnn import SpmmgnnError
from spmmgnn.runtime.threads import (
    busy_setting,
    default_threads,
    fair_share,
    others_busy,
    threads_for,
)


def test_unbound_ranks_split_the_node():
    cores = set(range(32))
    assert fair_share(cores, [cores] * 4) == 8
    assert fair_share(cores, [cores] * 3) == 10


def test_ranks_bound_to_disjoint_cores_keep_all_of_theirs():
    sets = [set(range(8 * r, 8 * r + 8)) for r in range(4)]  # 4 ranks x 8 cores each
    assert [fair_share(s, sets) for s in sets] == [8, 8, 8, 8]


def test_partly_shared_cores_count_by_share():
    a, b = {0, 1, 2, 3}, {2, 3, 4, 5}  # cores 2 and 3 shared by both
    assert fair_share(a, [a, b]) == 3 and fair_share(b, [a, b]) == 3
    assert fair_share({0}, [{0}] * 5) == 1  # never below one


def test_single_rank_gets_its_affinity(monkeypatch):
    monkeypatch.delenv("SPMMGNN_THREADS", raising=False)
    expected = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    if expected is None:
        pytest.skip("no sched_getaffinity")
    assert default_threads() == expected


def test_bad_environment_value_is_a_clear_error(monkeypatch):

    monkeypatch.setenv("SPMMGNN_THREADS", "two")
    with pytest.raises(SpmmgnnError, match="positive integer"):
        default_threads()


@pytest.mark.parametrize("P", [1, 2])
def test_library_calls_leave_the_callers_threads(tmp_path, P):
    """torch's count (set to 1 before numba's pool starts inside the library), OpenBLAS's
    (2) and numba's count in the calling thread (its default, 2) are the same after building
    an operator and running matmul, matmul_t, gram, qr and the nn layers as before; the
    library's own calls run at its count (1 from $SPMMGNN_THREADS)."""
    from ..mpi import run_mpi_json

    env = {"NUMBA_NUM_THREADS": "2", "SPMMGNN_THREADS": "1"}
    states = run_mpi_json(P, "thread_state.py", tmp_path, env=env)
    assert len(states) == P
    for s in states:
        assert s["torch_after_build"] == 1
        assert s["before"] == {"torch": 1, "numba": 2, "blas": s["before"]["blas"]}
        assert set(s["before"]["blas"]) == {2}
        assert s["after"] == s["before"] == s["after_scope"]
        assert s["library"] == 1
        assert s["inside"]["numba"] == 1 and set(s["inside"]["blas"]) == {1}
        assert s["inside"]["torch"] == 1


@pytest.mark.parametrize("threads, cores, others, expected", [
    (2, 2, 0.0, 2), (2, 2, 0.4, 2), (2, 2, 0.6, 1), (2, 2, 1.0, 1), (2, 2, 3.0, 1),
    (16, 16, 1.0, 15), (4, 16, 8.0, 4), (1, 2, 0.0, 1)])
def test_threads_for_leaves_busy_cores_to_others(threads, cores, others, expected):
    assert threads_for(threads, cores, others) == expected


def test_others_busy_excludes_this_process():
    # 1 s on 2 cores (200 jiffies), 190 busy: 1.9 cores busy, 0.9 of them this process's
    assert others_busy((0.0, 0, 0, 0.0), (1.0, 190, 200, 0.9), 2) == pytest.approx(1.0)
    assert others_busy((0.0, 0, 0, 0.0), (1.0, 100, 200, 1.2), 2) == 0.0  # never < 0
    assert others_busy((1.0, 0, 0, 0.0), (1.0, 0, 0, 0.0), 2) is None  # no time passed


@pytest.mark.parametrize("value", ["-1", "two", "nan"])
def test_bad_busy_cores_value_is_a_clear_error(monkeypatch, value):
    monkeypatch.setenv("SPMMGNN_BUSY_CORES", value)
    with pytest.raises(SpmmgnnError, match="SPMMGNN_BUSY_CORES"):
        busy_setting()
    with pytest.raises(SpmmgnnError, match="SPMMGNN_BUSY_CORES"):
        default_threads()


@pytest.mark.parametrize("P", [1, 2])
def test_busy_cores_take_threads_and_change_no_number(tmp_path, P):
    """2 threads per rank chosen; with all but 0.9 of the cores busy the step runs 1
    (numba, torch and the BLAS inside its scope; torch's count put back after), and the
    losses and final parameters are the same bits as with 2, also when the count changes
    at every step."""
    from ..mpi import run_mpi_json

    out = run_mpi_json(P, "busy_threads.py", tmp_path, env={"NUMBA_NUM_THREADS": "2"})
    quiet, busy, switch = out["quiet"], out["busy"], out["switch"]
    assert len(quiet) == P
    for r in range(P):
        assert quiet[r]["threads"] == busy[r]["threads"] == 2
        assert set(quiet[r]["ran"]) == {2} and set(busy[r]["ran"]) == {1}
        assert switch[r]["ran"] == [1, 2, 1, 2, 1]
        for run in (busy[r], switch[r]):
            assert run["losses"] == quiet[r]["losses"]
            assert run["params"] == quiet[r]["params"]
    assert out["inside_busy"]["numba"] == 1 and out["inside_busy"]["torch"] == 1
    assert set(out["inside_busy"]["blas"]) == {1}
    assert out["after"]["torch"] == 2


@pytest.mark.parametrize("rows", [0, 1, 1003, 20_011])
def test_weight_gradient_is_the_same_bits_on_fewer_running_threads(monkeypatch, rows):
    """``dense_host.weight_grad`` (OpenBLAS splits g.T @ h over the rows by its own thread
    count) gives the same bits with 2 threads chosen whether 2 or 1 run, and g.T @ h."""
    from spmmgnn.nn.linear import weight_grad
    from spmmgnn.runtime import threads

    rng = np.random.default_rng(rows)
    g = rng.standard_normal((rows, 40)).astype(np.float32)
    h = rng.standard_normal((rows, 24)).astype(np.float32)
    before = threads.get_threads()
    if threads.set_threads(2) < 2:
        threads.set_threads(before)
        pytest.skip("numba's pool has one thread here")
    monkeypatch.setattr(threads, "LOOK_SECONDS", 0.0)
    got = {}
    try:
        for busy in ("0", f"{len(os.sched_getaffinity(0)) - 0.9:g}"):
            monkeypatch.setenv("SPMMGNN_BUSY_CORES", busy)
            with threads.scope():
                got[threads.running_threads()] = weight_grad(g, h)
    finally:
        monkeypatch.setenv("SPMMGNN_BUSY_CORES", "0")
        threads.set_threads(before)
    assert sorted(got) == [1, 2]
    assert np.array_equal(got[1], got[2])
    np.testing.assert_allclose(got[2], g.astype(np.float64).T @ h, rtol=1e-4, atol=1e-4)


def test_bad_busy_cores_stops_train_with_one_line():
    """With ``--threads`` (no layout chosen, so no default_threads) a bad
    $SPMMGNN_BUSY_CORES still stops every rank before training with one readable line."""
    from ..mpi import run_cli

    proc = run_cli(2, "train", "--threads", "1", "--epochs", "1", "--csbm-n", "300",
                   env={"SPMMGNN_BUSY_CORES": "two"})
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert out.count("$SPMMGNN_BUSY_CORES must be 'auto' or a number of cores >= 0") == 1
    assert "Traceback" not in out


_BURN = """
import json, os, time
import spmmgnn  # before numpy: its wait settings reach OpenBLAS when numpy loads it
import numpy as np
from threadpoolctl import threadpool_limits
a = np.random.default_rng(0).random((700, 700))
with threadpool_limits(2, user_api="blas"):
    for _ in range(3):
        a @ a
    t0 = time.process_time()
    time.sleep(0.3)
    burnt = time.process_time() - t0
print(json.dumps(dict(timeout=os.environ.get("OPENBLAS_THREAD_TIMEOUT"), burnt=burnt)))
"""


def _burn(env_value: str | None) -> dict:
    import json
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"}
    if env_value is not None:
        env["OPENBLAS_THREAD_TIMEOUT"] = env_value
    proc = subprocess.run([sys.executable, "-c", _BURN], capture_output=True, text=True,
                          env=env, timeout=120, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_openblas_idle_threads_sleep_after_a_product():
    """``import spmmgnn`` (before numpy) makes OpenBLAS's idle threads sleep at once: after a
    2-thread product, a 0.3 s pause burns (almost) no CPU. OpenBLAS's own default spins its
    helper ~0.1 s after every call (taking the core from the numba kernel after it). The
    setting reaches OpenBLAS as it loads and leaves ``os.environ`` as it was; a value the
    user set is kept."""
    mine = _burn(None)
    assert mine["timeout"] is None
    assert mine["burnt"] < 0.05, mine
    assert _burn("28")["timeout"] == "28"


@pytest.mark.parametrize("rows, k, f", [(0, 8, 8), (1003, 40, 24), (40_011, 128, 10),
                                        (30_001, 10, 128)])
def test_panel_products_do_not_depend_on_the_cores_free(monkeypatch, rows, k, f):
    """``dense_host.panel_matmul`` (one panel of rows per chosen thread, each on one OpenBLAS
    thread, so no OpenBLAS worker is left spinning) writes, for a chosen thread count, the
    bits of one single-threaded product per panel, however many threads busy cores leave to
    run the panels, whatever OpenBLAS's own thread count. (OpenBLAS 0.3.31 gives a float32
    row other last bits in another panel, so the bits are those of the chosen count.)"""
    from threadpoolctl import threadpool_limits

    from spmmgnn.backend import dense_host as linear

    monkeypatch.setattr(linear, "PANEL_ROWS", 64)  # panels even on the small shapes
    rng = np.random.default_rng(rows)
    for dtype in (np.float32, np.float64):
        a, b = (rng.standard_normal(s).astype(dtype) for s in ((rows, k), (k, f)))
        for t in (1, 2, 3, 7):
            bounds = linear._bounds(rows, t) if t > 1 else np.array([0, rows])
            panels = list(zip(bounds[:-1], bounds[1:], strict=True))
            with threadpool_limits(1, user_api="blas"):
                want = np.concatenate([a[lo:hi] @ b for lo, hi in panels])
                grad = np.concatenate([want[lo:hi] @ b.T for lo, hi in panels])
            np.testing.assert_allclose(want, a @ b, rtol=1e-4, atol=1e-4)
            monkeypatch.setattr(linear, "get_threads", lambda t=t: t)
            for running, blas in ((t, 2), (1, 2), (1, 1)):  # quiet, busy; BLAS's own count
                monkeypatch.setattr(linear, "running_threads", lambda r=running: r)
                with threadpool_limits(blas, user_api="blas"):
                    out = np.full((rows, f), np.nan, dtype=dtype)
                    assert linear.panel_matmul(a, b, out) is out
                    assert np.array_equal(out, want), (dtype, t, running, blas)
                    out = np.full((rows, k), np.nan, dtype=dtype)  # the input gradient's
                    linear.panel_matmul(want, b.T, out)
                    assert np.array_equal(out, grad), (dtype, t, running, blas)


def test_dot_and_norm_run_blas_at_the_library_threads_whatever_the_import_order(tmp_path):
    """A script that imports numpy before spmmgnn (every documented example) loads OpenBLAS
    with its defaults: all the cores, idle threads spinning after a threaded call. ``dot``
    and ``norm`` of 40,000 rows a rank at P = 2 (one library thread a rank) then ran
    OpenBLAS's worker threads, 40-76 ms a call, 1.4 s of their CPU in 60 calls; now they
    run at the library's one thread: the workers get no CPU time, and the caller's BLAS
    count is left as it was."""
    from ..mpi import run_mpi_json

    states = run_mpi_json(2, "blas_threads.py", tmp_path, env={"SPMMGNN_THREADS": "1"})
    for s in states:
        assert s["library"] == 1 and s["dot_right"], s
        assert min(s["before"]) > 1 and s["after"] == s["before"], s  # the caller's
        assert s["helper_cpu"] <= 0.02, s  # (one clock tick is 0.01 s)
