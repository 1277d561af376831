"""Test-wide settings: numba may start up to 4 threads even on a smaller machine, so the
thread-count tests really run 2 and 3 threads (oversubscribed if need be) instead of being
clamped to 1 and silently comparing 1 thread with 1 thread."""

from __future__ import annotations

import os

os.environ.setdefault("NUMBA_NUM_THREADS", str(max(4, os.cpu_count() or 1)))
