"""Failure behaviour of real ``mpiexec`` jobs: every fault ends the whole job, quickly, with a
non-zero status and a message naming the rank and the cause; never a hang.

Cases (each must end within ``DEADLINE`` seconds):

1. a plain ``RuntimeError`` on rank 1 of 3 in user code before ``op.matmul`` (the abort hook
   the script installs with ``spmmgnn.install_abort_hook()``);
2. the same raised in a ``threading.Thread`` of rank 1 (thread hook), also inside a
   ``spmmgnn`` command (the hook the command installs);
3. the opt-out (``SPMMGNN_ABORT_ON_EXCEPTION=0``) leaves the hooks uninstalled;
4. bad input on one rank during setup (``from_block_row`` shape, ``HaloPlan`` ghost order):
   every rank gets the same collective SpmmgnnError, then the job ends;
5. a ``RuntimeError`` on one rank in the middle of ``Trainer.fit`` (library API, no CLI);
6. SIGKILL of one rank of ``spmmgnn train``;
7. SIGTERM and SIGINT to ``mpiexec`` running ``spmmgnn train``;
8. kill-and-resume: a run SIGKILLed after a random epoch and resumed ends with parameters
   bit-identical to an uninterrupted run, without a codec and with ``--codec int2``, and no
   temporary checkpoint file is left behind.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from ..mpi import mpiexec, own_files, read_own_files, run_mpi, worker

DEADLINE = 30.0  # seconds from the fault to the end of the job
STARTUP = 120.0  # seconds a job may take to import and reach its first epoch


def _run(n: int, script: str, *args: str, env: dict | None = None):
    """Run a worker that is expected to fail; returns (process, seconds). The process's
    stdout and stderr are Hydra's followed by what each rank wrote to its own files
    (``own_files``: an abort cannot cut those)."""
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        own = Path(tmp)
        proc = run_mpi(n, script, *args, check=False, timeout=STARTUP + DEADLINE, env=env,
                       prefix=own_files(own, stdout=True))
        proc.stdout += "".join(read_own_files(own, n, "out"))
        proc.stderr += "".join(read_own_files(own, n, "err"))
    return proc, time.monotonic() - t0


# ------------------------------------------------------------------ exceptions
NOT_ASKED = {"SPMMGNN_ABORT_ON_EXCEPTION": ""}  # no hook at import: only the explicit call's


@pytest.mark.parametrize("where", ["main", "thread"])
def test_user_exception_on_one_rank_aborts_the_job(where):
    proc, _ = _run(3, "fault_user.py", *(["thread"] if where == "thread" else []),
                   env=NOT_ASKED)
    assert proc.returncode != 0
    assert "finished" not in proc.stdout
    assert "[rank 1] spmmgnn: unhandled RuntimeError" in proc.stderr
    assert "user bug on purpose" in proc.stderr
    if where == "thread":
        assert "in thread 'worker'" in proc.stderr


def test_abort_hook_opt_out():
    """``import spmmgnn`` installs no hook; ``spmmgnn.install_abort_hook()`` does, unless
    ``SPMMGNN_ABORT_ON_EXCEPTION=0`` opts out."""
    code = ("import sys, spmmgnn, spmmgnn.runtime.abort as a; before = a.is_installed(); "
            "spmmgnn.install_abort_hook(); sys.stdout.write(f'{before} {a.is_installed()}')")
    for value, want in (("0", "False False"), ("", "False True")):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env=dict(os.environ, SPMMGNN_ABORT_ON_EXCEPTION=value), check=True)
        assert out.stdout == want


def test_thread_exception_in_a_command_aborts_the_job():
    """The command installs the abort hook itself: a thread's exception on rank 1, whose main
    thread then leaves while rank 0 waits in a collective, ends the job (no hang: the
    launch's time limit) with the rank and the cause named."""
    proc, _ = _run(2, "fault_cli.py", "spmm", env=NOT_ASKED)
    assert proc.returncode != 0
    assert "[rank 1] spmmgnn: unhandled RuntimeError in thread 'worker'" in proc.stderr
    assert "command thread bug on purpose" in proc.stderr


@pytest.mark.parametrize("mode,cause", [("block_row", "rank 1"), ("halo", "ghost")])
def test_setup_error_on_one_rank_is_collective(mode, cause):
    proc, _ = _run(3, "fault_setup.py", mode)
    assert proc.returncode != 0
    # ranks share one pipe, so lines may interleave: match each report on its own
    caught = re.findall(r"rank (\d) caught SpmmgnnError\(collective=(\w+)\): (.*?\(rank 1\))",
                        proc.stdout)
    assert sorted(r for r, _, _ in caught) == ["0", "1", "2"], proc.stdout
    assert all(c == "True" for _, c, _ in caught)
    messages = {m for _, _, m in caught}
    assert len(messages) == 1 and cause in messages.pop(), caught


def test_exception_in_the_middle_of_training_aborts():
    proc, _ = _run(3, "fault_train.py", "raise", "3", "2", env=NOT_ASKED)
    assert proc.returncode != 0
    assert "training finished" not in proc.stdout
    assert "[rank 2] spmmgnn: unhandled RuntimeError" in proc.stderr
    assert "training bug on purpose at epoch 3" in proc.stderr


# ------------------------------------------------------------------ signals
TRAIN = ["train", "--csbm-n", "1200", "--hidden", "16", "--dropout", "0.5", "--quiet"]


def _start_training(tmp_path: Path, *flags: str, sleep: float = 0.3, n: int = 2):
    """Start ``spmmgnn train`` (via fault_train.py cli) in its own process group; each
    rank's stderr goes to ``tmp_path/stderr/rank<r>.err`` (``own_files``)."""
    pid_dir = tmp_path / "pids"
    env = dict(os.environ, SPMMGNN_THREADS="1", PYTHONUNBUFFERED="1",
               SPMMGNN_TEST_PID_DIR=str(pid_dir), SPMMGNN_TEST_EPOCH_SLEEP=str(sleep))
    cmd = [mpiexec(), "-n", str(n), *own_files(tmp_path / "stderr"), sys.executable,
           str(worker("fault_train.py")), "cli", *TRAIN, *flags]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True)
    return proc, pid_dir


def _rank_stderr(pid_dir: Path, n: int = 2) -> list[str]:
    """What each rank wrote to its stderr (see ``_start_training``)."""
    return read_own_files(pid_dir.parent / "stderr", n)


def _wait_for(predicate, proc, what: str, timeout: float = STARTUP) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"job ended before {what}:\n{out[-2000:]}\n{err[-4000:]}")
        if time.monotonic() > end:
            _kill_group(proc)
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _kill_group(proc) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.communicate()


def _finish(proc) -> tuple[int, str, str, float]:
    """Wait at most DEADLINE seconds for the job; (status, stdout, stderr, seconds)."""
    t0 = time.monotonic()
    try:
        out, err = proc.communicate(timeout=DEADLINE)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        raise AssertionError(f"the job was still running {DEADLINE} s after the fault") from None
    return proc.returncode, out, err, time.monotonic() - t0


def _pid(pid_dir: Path, rank: int) -> int:
    return int((pid_dir / f"rank{rank}.pid").read_text())


def _pids_written(pid_dir: Path, n: int):
    return lambda: all((pid_dir / f"rank{r}.pid").exists() for r in range(n))


def test_sigkill_of_one_rank_ends_the_job(tmp_path):
    proc, pid_dir = _start_training(tmp_path, "--epochs", "400")
    _wait_for(_pids_written(pid_dir, 2), proc, "the ranks to start")
    time.sleep(1.0)
    victim, other = _pid(pid_dir, 1), _pid(pid_dir, 0)
    os.kill(victim, signal.SIGKILL)
    status, out, err, _ = _finish(proc)
    assert status != 0
    # a SIGKILLed rank cannot speak: mpiexec names a pid of the job and the signal. Hydra
    # then SIGKILLs the other rank too and reports whichever termination it handles first
    # (CI saw rank 0's pid once), so either pid of the job is right
    text = out + err
    assert "signal 9" in text and any(f"PID {p}" in text for p in (victim, other)), text[-3000:]


@pytest.mark.parametrize("sig,code,name", [(signal.SIGTERM, 143, "terminated by SIGTERM"),
                                           (signal.SIGINT, 130, "interrupted by SIGINT")])
def test_signal_to_mpiexec_ends_the_job(tmp_path, sig, code, name):
    proc, pid_dir = _start_training(tmp_path, "--epochs", "400")
    _wait_for(_pids_written(pid_dir, 2), proc, "the ranks to start")
    time.sleep(1.0)
    proc.send_signal(sig)
    status, _, hydra_err, _ = _finish(proc)
    ranks = _rank_stderr(pid_dir)
    text = hydra_err + "".join(ranks)
    assert status == code, text[-3000:]
    # mpiexec forwards the signal to both ranks; the first to handle it aborts the job, and a
    # rank blocked inside an MPI call (waiting for that one) ends without a line of its own.
    said = [r for r in (0, 1) if f"spmmgnn train: rank {r} of 2: {name}" in ranks[r]]
    assert said, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    assert any(f"MPI_Abort(MPI_COMM_WORLD, {code})" in ranks[r] for r in said), text[-3000:]


# ------------------------------------------------------------------ kill and resume
def _params(path: Path) -> dict:
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files if k != "meta"}


def _epoch(path: Path) -> int:
    try:
        with np.load(path, allow_pickle=False) as z:
            return int(json.loads(str(z["meta"]))["epoch"])
    except (OSError, ValueError, KeyError):
        return 0


@pytest.mark.parametrize("codec", ["none", "int2"])
@pytest.mark.slow
def test_sigkill_and_resume_is_bit_identical(tmp_path, codec):
    epochs = 10
    flags = ["--epochs", str(epochs), "--input-dropout", "0.1", "--codec", codec]
    full = tmp_path / "full.npz"
    proc, _ = _start_training(tmp_path / "a", *flags, "--checkpoint", str(full), sleep=0)
    status, _, err, _ = _finish_long(proc)
    assert status == 0, err[-3000:]

    kill_after = random.Random(f"resume-{codec}").randint(2, epochs - 2)
    part = tmp_path / "part.npz"
    proc, pid_dir = _start_training(tmp_path / "b", *flags, "--checkpoint", str(part),
                                    "--checkpoint-every", "1", sleep=0.5)
    _wait_for(lambda: _epoch(part) >= kill_after, proc, f"epoch {kill_after}")
    os.kill(_pid(pid_dir, 0), signal.SIGKILL)
    status, _, _, _ = _finish(proc)
    assert status != 0
    stopped = _epoch(part)
    assert kill_after <= stopped < epochs
    assert not list(part.parent.glob(".part.npz.*")), "a temporary checkpoint was left behind"

    proc, _ = _start_training(tmp_path / "c", *flags, "--checkpoint", str(part), "--resume",
                              sleep=0)
    status, _, err, _ = _finish_long(proc)
    assert status == 0, err[-3000:]
    a, b = _params(full), _params(part)
    assert set(a) == set(b) and any(k.startswith("opt/") for k in a)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    assert not list(part.parent.glob(".part.npz.*"))


def _finish_long(proc):
    try:
        out, err = proc.communicate(timeout=STARTUP + 60)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        raise
    return proc.returncode, out, err, 0.0


@pytest.mark.parametrize("P", [2, 3])
def test_ranks_waiting_for_root_in_from_scipy_do_not_spin(tmp_path, P):
    """While root checks the matrix (0.3 s) and cuts the block rows (0.6 s each), the other
    ranks sleep: the time they are runnable (on a core or queued for one, whatever the
    machine's load) is a small part of from_scipy's wall time."""
    from ..mpi import run_mpi_json

    if not os.path.exists("/proc/self/schedstat"):
        pytest.skip("needs Linux's /proc/self/schedstat")
    times = run_mpi_json(P, "quiet_wait.py", tmp_path)
    for runnable, cpu, wall in times[1:]:
        assert wall > 0.8, (runnable, cpu, wall)
        assert runnable < 0.35 * wall, (runnable, cpu, wall)
