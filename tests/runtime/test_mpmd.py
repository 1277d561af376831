"""Ranks that disagree on the run, launched MPMD (``mpiexec -n 1 ... : -n 1 ...``: each rank
its own command line), and jobs stuck in MPI.

- Every setting that changes what a rank does is agreed before any work
  (``spmmgnn.runtime.agreement``): a difference is one ``error:`` line on rank 0 and status 2 on
  every rank, naming the setting and each rank's value: the command line of ``train``,
  ``spmm``, ``bench``, ``partition`` (flags that hung, trained drifting weights or ended in
  MPI tracebacks before), a usage error on one rank, ``$SPMMGNN_PERSISTENT`` on one rank;
  the library's ``RunSpec``, ``TrainConfig``, an operator's and a grid's arguments.
- Ranks in different calls of one operator (``matmul`` against ``dot``, ``gram``, ``norm``,
  ``allreduce``, ...) meet in its one call probe and get one error.
- A job whose ranks are blocked in MPI calls that never return ends within ``DEADLINE``
  seconds of SIGTERM or SIGINT to ``mpiexec``; a rank whose launcher's proxy is gone ends.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time
from pathlib import Path

import pytest

from spmmgnn.runtime.agreement import canonical, disagreement, per_rank
from spmmgnn.runtime.signals import GRACE, LAST_RESORT, PARENT_POLL

from ..mpi import (
    mpi_env,
    mpmd_command,
    one_line_error,
    own_files,
    read_own_files,
    run_mpmd,
    worker,
)

CLI = ["-m", "spmmgnn.cli"]
SAME = "; every rank must be given the same settings"
# the worker's command-line cases: what the one error line says after "the ranks disagree
# on the run: "
CLI_CASES = {
    "train_epochs": "--epochs is 2 on rank 0 and 3 on rank 1",
    "train_algorithm": "--algorithm is sparse1d on rank 0 and oblivious1d on rank 1",
    "train_plexus_blocks": "--plexus-blocks is 1 on rank 0 and 2 on rank 1",
    "train_grid_layout": "--grid-layout is False on rank 0 and True on rank 1",
    "train_eval_every": "--eval-every is 1 on rank 0 and 2 on rank 1",
    "train_checkpoint_every": "--checkpoint-every is 1 on rank 0 and 2 on rank 1",
    "train_label_propagation": "--label-propagation is 0.0 on rank 0 and 0.5 on rank 1",
    "train_resume": "--resume is False on rank 0 and True on rank 1",
    "train_lr": "--lr is 0.01 on rank 0 and 0.1 on rank 1",
    "train_seed": "--seed is 0 on rank 0 and 1 on rank 1",
    "train_dropout": "--dropout is 0.5 on rank 0 and 0.2 on rank 1",
    "train_hidden": "--hidden is 8 on rank 0 and 16 on rank 1",
    "train_dtype": "--dtype is float32 on rank 0 and float64 on rank 1",
    "train_layers": "--layers is 2 on rank 0 and 3 on rank 1",
    "train_model": "--model is gcn on rank 0 and sage on rank 1",
    "train_layernorm": "--layernorm is False on rank 0 and True on rank 1",
    "train_threads": "--threads is 1 on rank 0 and 0 on rank 1",
    "spmm_repeat": "--repeat is 2 on rank 0 and 3 on rank 1",
    "spmm_algorithms": "--algorithm is [sparse1d] on rank 0 and [sparse1d, oblivious1d] on "
                       "rank 1",
    "spmm_dtype": "--dtype is float32 on rank 0 and float64 on rank 1",
    "spmm_or_train": "the command is spmm on rank 0 and train on rank 1",
    "bench": "--repeat is 2 on rank 0 and 3 on rank 1",
    "partition": "--parts is 2 on rank 0 and 3 on rank 1",
    "usage_error": "the command is train on rank 0 and \"a usage error (argument --epochs: "
                   "invalid int value: 'x')\" on rank 1",
    "persistent_env": "$SPMMGNN_PERSISTENT is 1 on rank 0 and 0 on rank 1",
}
LIBRARY_CASES = {
    "run_spec": "the ranks disagree on the run: RunSpec.epochs is 2 on rank 0 and 3 on rank 1",
    "train_config_epochs": "the ranks disagree on the training run: TrainConfig.epochs is 2 on "
                           "rank 0 and 3 on rank 1",
    "train_config_lr": "TrainConfig.lr is 0.01 on rank 0 and 0.1 on rank 1",
    "train_config_seed": "TrainConfig.seed is 0 on rank 0 and 1 on rank 1",
    "train_config_dropout": "TrainConfig.dropout is 0.5 on rank 0 and 0.1 on rank 1",
    "operator_exchange": "the ranks disagree on the operator: exchange is flat on rank 0 and "
                         "node on rank 1",
    "operator_persistent_env": "the ranks disagree on the operator: $SPMMGNN_PERSISTENT is 1 "
                               "on rank 0 and 0 on rank 1",
    # each rank's own device (once "rank 0: cpu, rank 0: cpu")
    "grid_device": "the ranks disagree on the grid: device is cpu on rank 0 and None on rank 1",
}
DIFFERENT_CALLS = "the ranks call different methods at the same time"
CALL_CASES = {
    "first_matmul_vs_dot": "matmul and dot", "matmul_vs_gram": "matmul and gram",
    "norm_vs_matmul_t": "matmul_t and norm", "allreduce_vs_matmul": "matmul and allreduce",
    "fetch_rows_vs_dot": "dot and fetch_rows", "qr_vs_allgather_rows": "qr and allgather_rows",
    "scatter_rows_vs_norm": "scatter_rows and norm",
}


@pytest.fixture(scope="module")
def agreement(tmp_path_factory):
    out = tmp_path_factory.mktemp("agreement") / "cases.json"
    script = str(worker("run_agreement.py"))
    proc = run_mpmd([script, str(out), "a"], [script, str(out), "b"], timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize("case", sorted(CLI_CASES))
def test_command_lines_that_differ_are_one_error(agreement, case):
    (status0, said0), (status1, said1) = agreement[case]
    assert status0 == status1 == 2, agreement[case]
    assert said0 == (f"spmmgnn: error: the ranks disagree on the run: {CLI_CASES[case]}{SAME}"
                     "\n"), said0
    assert said1 == "", said1  # (rank 0 speaks)


@pytest.mark.parametrize("case", sorted(LIBRARY_CASES))
def test_library_settings_that_differ_are_one_error(agreement, case):
    got = agreement[case]
    assert got[0] == got[1] and got[0][0] is True, got  # collective, the same on both ranks
    assert LIBRARY_CASES[case] in got[0][1] and got[0][1].endswith(SAME), got


@pytest.mark.parametrize("case", sorted(CALL_CASES))
def test_ranks_in_different_calls_get_one_error(agreement, case):
    got = agreement[case]
    assert got[0] == got[1] and got[0][0] is True, got
    assert got[0][1] == (f"{DIFFERENT_CALLS} ({CALL_CASES[case]}): every rank must make the "
                         "same collective call"), got
    assert agreement["after"][0][1] < 1e-12  # the operator multiplies right afterwards


@pytest.mark.parametrize("ranks,rank_env,words", [
    ([["train", "--csbm-n", "300", "--epochs", "2", "--lr", "0.1"],
      ["train", "--csbm-n", "300", "--epochs", "3"]], None,
     "--epochs is 2 on rank 0 and 3 on rank 1; --lr is 0.1 on rank 0 and 0.01 on rank 1"),
    ([["spmm", "--scale", "6", "--dtype", "float32"],
      ["spmm", "--scale", "6", "--dtype", "float64"]], None,
     "--dtype is float32 on rank 0 and float64 on rank 1"),
    ([["spmm", "--scale", "6"]] * 2, [{}, {"SPMMGNN_PERSISTENT": "0"}],
     "$SPMMGNN_PERSISTENT is 1 on rank 0 and 0 on rank 1"),
])
def test_an_mpmd_launch_of_the_command_line(ranks, rank_env, words):
    proc = run_mpmd(*[CLI + r for r in ranks], rank_env=rank_env, timeout=120)
    one_line_error(proc, f"spmmgnn: error: the ranks disagree on the run: {words}{SAME}")
    assert proc.stdout == "", proc.stdout  # nothing ran: no header, no results


def test_the_message_names_each_setting_and_the_ranks_holding_each_value():
    runs = [{"": "the run", "the command": "train", "--epochs": e, "--lr": 0.1, "--seed": s,
             "--hidden": 8, "--layers": 2, "--dropout": 0.5}
            for e, s in ((3, 0), (3, 0), (3, 1), (4, 0))]
    assert disagreement(runs) == (
        "the ranks disagree on the run: --epochs is 3 on ranks 0-2 and 4 on rank 3; --seed is "
        f"0 on ranks 0, 1 and 3 and 1 on rank 2{SAME}")
    for r, changes in enumerate(({"--hidden": 9}, {"--layers": 3}, {"--dropout": 0.1})):
        runs[r].update(changes)
    assert disagreement(runs).endswith(f"--layers is 2 on ranks 0, 2 and 3 and 3 on rank 1; "
                                       f"and 1 more setting(s){SAME}")
    other = [{"": "the run", "the command": "spmm", "--repeat": 2}, runs[1]]
    assert disagreement(other) == ("the ranks disagree on the run: the command is spmm on "
                                   f"rank 0 and train on rank 1{SAME}")
    assert disagreement([{"": "the run"}, {"": "the operator"}]) == (
        "the ranks are at different steps, agreeing on the run on rank 0 and the operator on "
        "rank 1; every rank must make the same calls")


def test_what_is_compared():
    import numpy as np

    assert per_rank("--quiet") and per_rank("TrainConfig.progress") and per_rank("RunSpec.quiet")
    assert not per_rank("--threads") and not per_rank("--json")
    assert canonical((2, 3)) == [2, 3] and canonical(np.float32(0.5)) == 0.5
    assert canonical(np.zeros((2, 3))) == "<ndarray (2, 3) float64>"
    assert canonical(object()) == "<object>"  # (never an address, which differs per rank)
    assert canonical(Path("a/b")) == "a/b"


# ------------------------------------------------------------------ stuck in MPI
DEADLINE = 10.0  # seconds from the signal to the end of every rank
SLACK = 10.0     # for a loaded machine
STARTUP = 120.0  # seconds a job may take to import and block


def _start_hang(tmp_path: Path):
    """The MPMD hang worker (rank 0 in a barrier, rank 1 in a receive); returns (process,
    rank pids) once both ranks are about to block."""
    script = str(worker("hang.py"))
    cmd = mpmd_command([script, str(tmp_path), "barrier"], [script, str(tmp_path), "recv"],
                       prefix=own_files(tmp_path / "err"))
    proc = subprocess.Popen(cmd, env=mpi_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    files = [tmp_path / f"rank{r}.pid" for r in (0, 1)]
    start = time.monotonic()
    while not all(f.exists() for f in files):
        if proc.poll() is not None or time.monotonic() - start > STARTUP:
            proc.kill()
            raise AssertionError(f"the ranks did not start: {proc.communicate()}")
        time.sleep(0.1)
    return proc, [int(f.read_text()) for f in files]


def _wait_gone(pids: list[int], timeout: float) -> list[int]:
    """Wait up to ``timeout`` seconds for the processes to end (``pidfd``: woken by their
    end, no polling); returns those still running."""
    fds = {}
    for pid in pids:
        try:
            fds[os.pidfd_open(pid)] = pid
        except ProcessLookupError:
            pass
    end = time.monotonic() + timeout
    try:
        while fds and time.monotonic() < end:
            ready, _, _ = select.select(list(fds), [], [], end - time.monotonic())
            for fd in ready:
                os.close(fd)
                del fds[fd]
        return [pid for pid in fds.values() if _running(pid)]
    finally:
        for fd in fds:
            os.close(fd)


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def _kill(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_job_stuck_in_mpi_ends_on_a_signal(tmp_path, sig, code):
    assert GRACE + LAST_RESORT < DEADLINE
    proc, pids = _start_hang(tmp_path)
    try:
        proc.send_signal(sig)  # mpiexec forwards it to both ranks
        try:
            proc.communicate(timeout=DEADLINE + SLACK)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the job still ran {DEADLINE + SLACK:g} s after {sig.name}")
        assert not _wait_gone(pids, SLACK)
        errs = read_own_files(tmp_path / "err", 2)
        assert proc.returncode == code, errs
        said = [e for e in errs if f"{sig.name} was not answered within {GRACE:g} s" in e]
        assert said and f"aborting the job with status {code}" in said[0], errs
        assert all("Traceback" not in e for e in errs), errs
    finally:
        proc.kill()
        _kill(pids)


def test_ranks_whose_launcher_is_gone_end(tmp_path):
    proc, pids = _start_hang(tmp_path)
    try:
        proxy = int(Path(f"/proc/{pids[0]}/stat").read_text().rsplit(")", 1)[1].split()[1])
        if "hydra_pmi_proxy" not in Path(f"/proc/{proxy}/cmdline").read_text():
            pytest.skip("the ranks' parent is not MPICH's launcher proxy")
        os.kill(proxy, signal.SIGKILL)
        assert not _wait_gone(pids, PARENT_POLL + SLACK)
        errs = read_own_files(tmp_path / "err", 2)
        assert all(f"the launcher's process {proxy} is gone; ending this rank" in e
                   for e in errs), errs
    finally:
        proc.kill()
        proc.communicate()
        _kill(pids)
