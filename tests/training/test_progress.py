"""The progress line of ``spmmgnn train`` (``training.progress``): after the first epoch and
every tenth of the run, redrawn in place on a terminal only (under ``mpiexec`` a rank's
stdout is a pipe), as getting-started says."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_the_progress_line_is_every_tenth_of_the_run():
    """getting-started says "after the first epoch and every 10 % of the epochs": 100
    epochs, 11 lines."""
    import io

    from spmmgnn.training.progress import Progress

    out = io.StringIO()
    bar = Progress(100, stream=out)
    row = dict(loss=1.0, train_acc=0.5, val_acc=0.5, test_acc=0.5)
    for epoch in range(1, 101):
        bar.update(epoch, row)
    lines = [ln.split()[1] for ln in out.getvalue().splitlines() if ln.strip()]
    assert lines == ["1/100"] + [f"{e}/100" for e in range(10, 101, 10)]
    text = " ".join((Path(__file__).parents[2] / "docs" / "getting-started.md").read_text()
                    .split())
    assert "a progress line after the first epoch and every 10 % of the epochs" in text
    assert "(each on a line of its own: under `mpiexec` rank 0's output reaches you through " \
        "a pipe, not a terminal;" in text


def test_under_mpiexec_the_progress_line_is_not_redrawn():
    """getting-started: under ``mpiexec`` a rank's stdout is a pipe even when ``mpiexec``
    writes to a terminal, so the progress line (redrawn in place on a terminal) prints a
    line per update; a terminal gets the redrawn line."""
    import io
    import pty

    from spmmgnn.training.progress import Progress

    from ..mpi import mpiexec

    controller, terminal = pty.openpty()
    try:
        proc = subprocess.run([mpiexec(), "-n", "1", sys.executable, "-c",
                               "import sys; print('tty', sys.stdout.isatty())"],
                              stdout=terminal, stderr=subprocess.PIPE, timeout=120)
        out = os.read(controller, 4096).decode()
    finally:
        os.close(controller)
        os.close(terminal)
    assert proc.returncode == 0 and "tty False" in out, (out, proc.stderr[-2000:])

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    row = dict(loss=1.0, train_acc=0.5, val_acc=0.5, test_acc=0.5)
    for stream, redrawn in ((Terminal(), True), (io.StringIO(), False)):
        bar = Progress(20, stream=stream)
        for epoch in range(1, 21):
            bar.update(epoch, row)
        text = stream.getvalue()
        assert ("\r" in text) == redrawn and text.count("\n") == (1 if redrawn else 11)
