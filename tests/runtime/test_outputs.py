"""Nothing lost (issue 41): what the tools write and read.

Writers (``spmmgnn.runtime.atomic``): a symbolic link is followed; a character device or FIFO is
written in place (a FIFO nobody reads is an error, not a hang); a directory, socket or block
device is one error; a full disk (``/dev/full``, ``ulimit -f``) is one error line with the old
file intact and no temporary left, HDF5 writes included (they segfaulted); temporaries of a
killed writer are removed by the next write, a live writer's are not; a signal swallowed in a
finalizer still keeps the old file. Commands: ``train --json`` that fails after training says
where the results went; a checkpoint of another run is not overwritten without
``--overwrite-checkpoint``; ``datasets`` / ``partition -o`` on a full disk, and SIGTERM /
SIGINT during their write, keep the old file; ``bench -o`` a device. Readers: results files
and checkpoints are bounded before they are read.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from spmmgnn import SpmmgnnError
from spmmgnn.runtime.atomic import MARKER, _host, atomic_path, check_writable, write_text_atomic

from ..mpi import one_line_error, run_cli, worker

EPOCH = ["--hidden", "8", "--quiet"]
OLD = b"the old content\n"


def _no_temps(folder: Path, name: str) -> list[Path]:
    """Temporaries of writes of ``name`` left in ``folder`` (should be none)."""
    return list(folder.glob(f".{name}.*.tmp"))


@pytest.fixture
def devices(tmp_path):
    """Character devices like /dev/null and /dev/full made in tmp_path (root only): a write
    that wrongly replaced them would replace these, not the system's."""
    try:
        os.mknod(tmp_path / "null", stat.S_IFCHR | 0o666, os.makedev(1, 3))
        os.mknod(tmp_path / "full", stat.S_IFCHR | 0o666, os.makedev(1, 7))
    except (PermissionError, OSError) as exc:
        pytest.skip(f"cannot make device nodes here ({exc})")
    return tmp_path / "null", tmp_path / "full"


def _is_char_device(path: Path) -> bool:
    return stat.S_ISCHR(os.lstat(path).st_mode)


# ------------------------------------------------------------------ the writer itself
def test_a_symlink_is_followed(tmp_path):
    target = tmp_path / "real.json"
    target.write_bytes(OLD)
    link = tmp_path / "link.json"
    link.symlink_to(target)
    write_text_atomic(link, "new")
    assert link.is_symlink() and target.read_text() == "new"
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "sub" / "made.json")
    write_text_atomic(dangling, "made")
    assert dangling.is_symlink() and (tmp_path / "sub" / "made.json").read_text() == "made"
    assert not _no_temps(tmp_path, "real.json") and not _no_temps(tmp_path / "sub", "made.json")


def test_directories_and_sockets_are_refused(tmp_path):
    folder = tmp_path / "folder"
    folder.mkdir()
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "sock"))
    try:
        for path, kind in ((folder, "a directory"), (tmp_path / "sock", "a socket")):
            for write in (lambda p: write_text_atomic(p, "x", "--json output"),
                          lambda p: check_writable(p, "--json output")):
                with pytest.raises(SpmmgnnError, match=f"cannot write --json output .*: it is "
                                                       f"{kind}; give a file name"):
                    write(path)
    finally:
        sock.close()
    assert folder.is_dir() and stat.S_ISSOCK(os.lstat(tmp_path / "sock").st_mode)


def test_devices_are_written_in_place(devices):
    null, full = devices
    write_text_atomic(null, "discarded")
    check_writable(full)
    with pytest.raises(SpmmgnnError, match=r"cannot write output .*full: No space left"):
        write_text_atomic(full, "x" * 10000)
    assert _is_char_device(null) and _is_char_device(full)
    assert not _no_temps(Path(tempfile.gettempdir()), "full")
    assert not _no_temps(full.parent, "full")


def test_a_fifo_is_written_in_place_and_one_without_reader_is_an_error(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    with pytest.raises(SpmmgnnError, match="no process reads this FIFO"):
        write_text_atomic(fifo, "lost")
    assert time.monotonic() - t0 < 5
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    time.sleep(0.2)  # the reader opens the FIFO first
    write_text_atomic(fifo, "through the pipe")
    reader.join(10)
    assert got == ["through the pipe"] and stat.S_ISFIFO(os.lstat(fifo).st_mode)


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_temporaries_of_killed_writers_are_removed_live_ones_kept(tmp_path):
    host, mark = _host(), MARKER
    dead = tmp_path / f".out.h5.{_dead_pid()}@{host}.abcd1234{mark}"
    live = tmp_path / f".out.h5.{os.getpid()}@{host}.efgh5678{mark}"
    elsewhere = tmp_path / f".out.h5.{_dead_pid()}@another-host.ijkl9012{mark}"
    longer = tmp_path / f".out.h5.b.{_dead_pid()}@{host}.mnop3456{mark}"  # out.h5.b's
    for p in (dead, live, elsewhere, longer):
        p.write_bytes(b"\0" * 100)
    write_text_atomic(tmp_path / "out.h5", "new")
    assert not dead.exists()
    assert live.exists() and elsewhere.exists() and longer.exists()


def test_files_spmmgnn_did_not_make_are_never_removed(tmp_path):
    """A user's files beside the target named like a temporary (``.NAME.WORD.tmp``, the
    pre-marker ``.NAME.PID@HOST.XXXXXXXX.tmp`` with a dead pid, the marker without our
    random token) all survive writes of the target."""
    host, dead = _host(), _dead_pid()
    user = [tmp_path / ".pj.json.backup.tmp", tmp_path / ".pj.json.v2.tmp",
            tmp_path / ".pj.json.k1ll3d.tmp", tmp_path / f".pj.json.{dead}@{host}.abcd1234.tmp",
            tmp_path / f".pj.json.{dead}@{host}.notes{MARKER}",
            tmp_path / f".pj.json.mine.{dead}@{host}.abcd1234{MARKER}"]
    for i, p in enumerate(user):
        p.write_text(f"user file {i}")
    write_text_atomic(tmp_path / "pj.json", "{}")
    check_writable(tmp_path / "pj.json")
    assert [p.read_text() for p in user] == [f"user file {i}" for i in range(len(user))]
    assert sorted(tmp_path.glob(f"*{MARKER}")) == sorted(user[-2:])


class _SigtermOnDelete:
    """SIGTERM to this process from a finalizer, where Python swallows the handler's
    exception (as it does in a C callback)."""

    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)


def test_a_swallowed_signal_keeps_the_old_file(tmp_path, capfd, monkeypatch):
    """SIGTERM handled inside a finalizer is swallowed by Python ("Exception ignored"); the
    write must still not replace the target, the signal must still end the command, and no
    traceback of the swallowed exception reaches stderr (CI saw one from a numba callback)."""
    from spmmgnn.runtime import signals

    target = tmp_path / "out.json"
    target.write_bytes(OLD)

    monkeypatch.setattr(sys, "unraisablehook", sys.__unraisablehook__)  # Python's, not pytest's
    previous = signals.install()
    try:
        with pytest.raises(signals.Terminated):
            with atomic_path(target) as tmp:
                tmp.write_text("new")
                _SigtermOnDelete()  # the handler's exception is swallowed by __del__
                time.sleep(0.05)
        assert target.read_bytes() == OLD and not _no_temps(tmp_path, "out.json")
        with pytest.raises(signals.Terminated):
            signals.check()
    finally:
        signals.uninstall(previous)
    assert signals.pending() is None
    err = capfd.readouterr().err
    assert "Exception ignored" not in err and "Traceback" not in err, err


FULL_DISK = """
import resource, sys
import numpy as np, scipy.sparse as sp
from spmmgnn import SpmmgnnError
from spmmgnn.data import h5graph
from spmmgnn.runtime.atomic import write_text_atomic
resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))
path = sys.argv[1]
A = sp.random(2000, 2000, density=0.05, random_state=1, format="csr")
x = np.ones((2000, 64), np.float32)
for write in (lambda: h5graph.write_graph(path, A, features=x),
              lambda: write_text_atomic(path, "x" * 300_000)):
    try:
        write()
    except SpmmgnnError as exc:
        print(exc)
try:  # past the free-space check: HDF5 itself meets the full disk
    with h5graph.h5_writer(path, 0) as h:
        h["a"] = np.arange(100_000)
        h.create_dataset("features", data=x, chunks=True)
except SpmmgnnError as exc:
    print(exc)
"""


def test_a_full_disk_is_one_error_with_the_old_file_kept(tmp_path):
    """``ulimit -f`` (Python ignores SIGXFSZ: writes beyond it fail with EFBIG like a full
    disk): the free-space check refuses first; HDF5 meeting it anyway no longer segfaults."""
    target = tmp_path / "g.h5"
    target.write_bytes(OLD)
    proc = subprocess.run([sys.executable, "-c", FULL_DISK, str(target)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]  # 139 was the segmentation fault
    lines = proc.stdout.splitlines()
    assert len(lines) == 3, proc.stdout
    assert "cannot write graph file" in lines[0] and "ulimit -f" in lines[0]
    assert "cannot write output" in lines[1] and "ulimit -f" in lines[1]
    assert lines[2].endswith("g.h5: File too large")
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr
    assert target.read_bytes() == OLD and not _no_temps(tmp_path, "g.h5")


# ------------------------------------------------------------------ the commands
def test_outputs_on_a_full_device_keep_the_results(tmp_path):
    link = tmp_path / "run.json"
    link.symlink_to("/dev/full")  # followed: the device is written in place, never replaced
    proc = run_cli(2, "train", "--csbm-n", "300", "--epochs", "2", *EPOCH, "--json", str(link))
    one_line_error(proc, "cannot write --json output", "No space left on device",
                   "the results were saved to")
    saved = Path(proc.stderr.split("the results were saved to ")[1].split()[0])
    try:
        result = json.loads(saved.read_text())
        assert result["epochs_run"] == 2 and len(result["history"]) == 2
    finally:
        saved.unlink()
    assert _is_char_device(Path("/dev/full")) and link.is_symlink()
    from mpi4py import MPI

    from spmmgnn.training.run import RunSpec, run_training

    out = tmp_path / "out.json"  # the final checkpoint fails: the results are written first
    spec = RunSpec(csbm_n=300, epochs=2, hidden=8, quiet=True, json=str(out),
                   checkpoint=str(link))
    with pytest.raises(SpmmgnnError, match=f"cannot write checkpoint .*No space left on "
                                           f"device; the results are in {out}"):
        run_training(spec, MPI.COMM_SELF)
    assert json.loads(out.read_text())["epochs_run"] == 2


def _trainer(checkpoint: Path, **overrides):
    """A one-rank trainer on a small CSBM (in this process: no launch needed for what is
    decided before training)."""
    from mpi4py import MPI

    from spmmgnn import ProcessGrid
    from spmmgnn.data.csbm import csbm
    from spmmgnn.training import TrainConfig, Trainer, distribute_graph

    data = distribute_graph(csbm(n=300, seed=1), ProcessGrid(MPI.COMM_SELF), "gcn")
    cfg = dict(epochs=2, hidden=8, progress=False, checkpoint=str(checkpoint))
    cfg.update(overrides)
    return Trainer(data, TrainConfig(**cfg))


def test_a_swallowed_signal_ends_training_after_its_epoch(tmp_path, monkeypatch):
    """A signal whose exception a callback swallowed (numba's object cache during the first
    epoch's compilation, in CI) stops training at the end of that epoch, not after all."""
    from spmmgnn.runtime import signals

    epochs = []

    def on_epoch_end(epoch, row, trainer):
        epochs.append(epoch)
        if epoch == 2:
            _SigtermOnDelete()
            time.sleep(0.05)

    monkeypatch.setattr(sys, "unraisablehook", sys.__unraisablehook__)
    trainer = _trainer(tmp_path / "ck.npz", epochs=6)
    previous = signals.install()
    try:
        with pytest.raises(signals.Terminated):
            trainer.fit(on_epoch_end)
    finally:
        signals.uninstall(previous)
    assert epochs == [1, 2]


def test_a_checkpoint_of_another_run_is_not_overwritten(tmp_path):
    ck = tmp_path / "ck.npz"
    _trainer(ck).fit()
    before = ck.read_bytes()
    with pytest.raises(SpmmgnnError, match=r"ck.npz holds another run \(hidden 8 != 16\); "
                                           "pass --overwrite-checkpoint"):
        _trainer(ck, hidden=16)
    assert ck.read_bytes() == before
    with pytest.warns(UserWarning, match="holds 2 epoch\\(s\\) of this same run; starting over"):
        _trainer(ck)
    not_one = tmp_path / "notes.npz"
    not_one.write_bytes(OLD)
    with pytest.raises(SpmmgnnError, match="is not readable.*it is not replaced: pass "
                                           "--overwrite-checkpoint"):
        _trainer(not_one)
    assert not_one.read_bytes() == OLD
    _trainer(ck, hidden=16, overwrite_checkpoint=True).fit()
    assert ck.read_bytes() != before


def _fsize_cli(limit: int, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, SPMMGNN_THREADS="1")
    return subprocess.run([sys.executable, str(worker("fsize_cli.py")), str(limit), *args],
                          capture_output=True, text=True, timeout=300, env=env)


def test_datasets_and_partition_on_a_full_disk(tmp_path):
    out = tmp_path / "g.h5"
    out.write_bytes(OLD)
    proc = _fsize_cli(1_000_000, "datasets", "csbm", "--n", "20000", "--out", str(out))
    one_line_error(proc, "cannot write graph file", "iB free (disk space or ulimit -f)")
    src = tmp_path / "src.h5"
    assert run_cli(1, "datasets", "csbm", "--n", "20000", "--out", str(src)).returncode == 0
    proc = _fsize_cli(1_000_000, "partition", str(src), "-k", "2", "--method", "metis-vol",
                      "-o", str(out))
    one_line_error(proc, "cannot write graph file", "ulimit -f")
    assert out.read_bytes() == OLD and not _no_temps(tmp_path, "g.h5")


@pytest.mark.parametrize("command,sig,code", [("datasets", signal.SIGTERM, 143),
                                              ("partition", signal.SIGINT, 130),
                                              ("datasets", signal.SIGKILL, -9)])
def test_a_signal_during_an_hdf5_write_keeps_the_old_file(tmp_path, command, sig, code):
    """SIGTERM / SIGINT: 143 / 130, the old file kept, no temporary. SIGKILL cannot be
    handled: its temporary stays until the next write of the file removes it."""
    out = tmp_path / "g.h5"
    out.write_bytes(OLD)
    if command == "datasets":
        args = ["datasets", "csbm", "--n", "150000", "--out", str(out)]
    else:
        src = tmp_path / "src.h5"
        assert run_cli(1, "datasets", "csbm", "--n", "80000", "--out",
                       str(src)).returncode == 0
        args = ["partition", str(src), "-k", "2", "--method", "metis-vol", "-o", str(out)]
    env = dict(os.environ, SPMMGNN_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-m", "spmmgnn.cli", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    end = time.monotonic() + 120

    def writing() -> bool:  # HDF5 has started writing the temporary (0.4 s before it ends)
        for p in _no_temps(tmp_path, "g.h5"):
            try:
                if p.stat().st_size > 0:
                    return True
            except FileNotFoundError:
                pass
        return False

    while not writing() and proc.poll() is None and time.monotonic() < end:
        time.sleep(0.002)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err[-3000:]
    assert "Traceback" not in err and "Exception ignored" not in err, err[-3000:]
    assert out.read_bytes() == OLD
    if sig == signal.SIGKILL:
        assert _no_temps(tmp_path, "g.h5")
        again = subprocess.run([sys.executable, "-m", "spmmgnn.cli", "datasets", "csbm", "--n",
                                "300", "--out", str(out)], env=env, capture_output=True,
                               text=True, timeout=120)
        assert again.returncode == 0, again.stderr[-3000:]
    assert not _no_temps(tmp_path, "g.h5")


def test_bench_results_on_devices(tmp_path, devices):
    null, full = devices
    sweep = ["bench", "--graph", "random:n=200,avg_degree=4", "--mode", "spmm", "--algorithm",
             "sparse1d", "--repeat", "1", "-f", "4", "--quiet"]
    proc = run_cli(1, *sweep, "-o", str(null))
    assert proc.returncode == 0 and "1 run(s) recorded" in proc.stdout, proc.stderr[-3000:]
    proc = run_cli(1, *sweep, "-o", str(full))
    one_line_error(proc, "cannot append to results file", "No space left on device")
    assert _is_char_device(null) and _is_char_device(full)


# ------------------------------------------------------------------ readers
def test_results_files_are_bounded_before_reading(tmp_path):
    from spmmgnn.benchmark.records import done_ids, read_records

    with pytest.raises(SpmmgnnError, match="not a regular file"):
        read_records("/dev/zero")  # endless: read it and the memory is gone
    assert done_ids("/dev/zero") == (set(), 0)  # bench -o /dev/zero: nothing to skip
    proc = run_cli(1, "report", "/dev/zero", "-o", str(tmp_path / "report"))
    one_line_error(proc, "cannot read results file /dev/zero: not a regular file")


def test_checkpoints_are_bounded_before_reading(tmp_path):
    """A member declaring more than the model's state is refused before it is read (the
    campaign's 8 GiB member; 64 MiB here to keep the test small) when resuming; the memory
    check's line names both sizes."""
    import zipfile

    from spmmgnn.data.limits import read_npz
    from spmmgnn.runtime.machine import check_memory

    ck = tmp_path / "ck.npz"
    _trainer(ck).fit()
    with zipfile.ZipFile(ck, "a", compression=zipfile.ZIP_DEFLATED) as zf, \
            zf.open("param/extra.npy", "w") as fh:
        np.lib.format.write_array(fh, np.zeros(2**23))  # 64 MiB declared, 64 KiB stored
    with pytest.raises(SpmmgnnError, match=r"declares 64.0 MiB of arrays where at most "
                                           r"[\d.]+ KiB are expected"):
        _trainer(ck, epochs=3, resume=True)
    assert read_npz(ck, "checkpoint", ("meta",))["meta"].ndim == 0  # the rest is fine
    with pytest.raises(SpmmgnnError, match=r"reading it needs about [\d,.]+ TiB and this node "
                                           r"has [\d,.]+ [GMT]iB available"):
        check_memory(2.0**61, "reading it")


def test_the_json_fallback_file_has_the_mode_open_gives(tmp_path):
    from spmmgnn.runtime.atomic import default_mode
    from spmmgnn.training.run import save_results

    link = tmp_path / "run.json"
    link.symlink_to("/dev/full")
    line = save_results(str(link), '{"a": 1}')
    saved = Path(line.split("the results were saved to ")[1].split()[0])
    try:
        assert stat.S_IMODE(saved.stat().st_mode) == default_mode() != 0o600
        assert json.loads(saved.read_text()) == {"a": 1}
    finally:
        saved.unlink()
