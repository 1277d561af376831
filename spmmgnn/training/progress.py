"""A one-line progress display for rank 0 (no dependency): redrawn in place on a terminal,
a line every ~10% of the run otherwise (logs, CI)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, total: int, enabled: bool = True, stream: TextIO | None = None,
                 start: int = 0):
        self.total = total
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.every = max(1, total // 10)
        self.t0 = time.perf_counter()
        self.start = start
        self._width = 0

    def update(self, epoch: int, row: dict, best: dict | None = None) -> None:
        """Show epoch ``epoch``'s loss and accuracies, and the test accuracy at the
        best-validation epoch so far (``best``)."""
        if not self.enabled:
            return
        done = epoch - self.start
        rate = (time.perf_counter() - self.t0) / max(1, done)
        text = (f"epoch {epoch:>{len(str(self.total))}}/{self.total}  loss {row['loss']:.4f}")
        if "train_acc" in row:
            text += (f"  acc train {row['train_acc']:.3f} val {row['val_acc']:.3f} "
                     f"test {row['test_acc']:.3f}")
        if best:
            text += f"  (best val: epoch {best['epoch']} test {best['test_acc']:.3f})"
        text += f"  {rate * 1e3:.1f} ms/epoch"
        if self.tty:
            pad = max(0, self._width - len(text))
            self.stream.write("\r" + text + " " * pad)
            self._width = len(text)
            if epoch == self.total:
                self.stream.write("\n")
                self._width = 0
        elif epoch % self.every == 0 or epoch == self.total or epoch == self.start + 1:
            self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.tty and self._width:
            self.stream.write("\n")
            self.stream.flush()
            self._width = 0
