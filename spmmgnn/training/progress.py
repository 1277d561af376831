"""A one-line progress display for rank 0 (no dependency): redrawn in place on a terminal,
a line every ~10% of the run otherwise (logs, CI). It writes to stdout, like the results, so
a log of ``mpiexec ... 2>&1`` keeps them in order (mpiexec forwards the two streams apart)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, total: int, enabled: bool = True, stream: TextIO | None = None,
                 start: int = 0):
        self.total = total
        self.enabled = enabled
        self.stream = stream or sys.stdout
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.every = max(1, total // 10)
        self.t0 = time.perf_counter()
        self.start = start
        self.shown = start
        self._width = 0

    def update(self, epoch: int, row: dict, best: dict | None = None) -> None:
        """Show epoch ``epoch``'s loss and accuracies, the test accuracy at the
        best-validation epoch so far (``best``), and the wall time per epoch (training step,
        evaluation and checkpoints) since the previous line; the run's first epoch includes
        the kernels' compilation (or cache load) and says so."""
        if not self.enabled:
            return
        due = self.tty or (epoch % self.every == 0 or epoch == self.total
                            or epoch == self.start + 1)
        if not due:
            return
        now = time.perf_counter()
        rate = (now - self.t0) / max(1, epoch - self.shown)
        first = self.shown == self.start
        self.t0, self.shown = now, epoch
        text = (f"epoch {epoch:>{len(str(self.total))}}/{self.total}  loss {row['loss']:.4f}")
        if "train_acc" in row:
            text += (f"  acc train {row['train_acc']:.3f} val {row['val_acc']:.3f} "
                     f"test {row['test_acc']:.3f}")
        if best:
            text += f"  (best val: epoch {best['epoch']} test {best['test_acc']:.3f})"
        text += f"  {rate * 1e3:.1f} ms/epoch"
        if first:
            text += " (first epoch: sets up the kernels)"
        if self.tty:
            pad = max(0, self._width - len(text))
            self.stream.write("\r" + text + " " * pad)
            self._width = len(text)
            if epoch == self.total:
                self.stream.write("\n")
                self._width = 0
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.tty and self._width:
            self.stream.write("\n")
            self.stream.flush()
            self._width = 0
