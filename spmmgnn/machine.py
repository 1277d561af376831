"""What the machine has and what this process uses: node memory, peak resident memory."""

from __future__ import annotations

import os
import resource
import sys


def available_bytes() -> int | None:
    """Memory available on this node (``/proc/meminfo`` MemAvailable, or sysconf), or None."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def peak_rss_bytes() -> int:
    """This process's peak resident memory so far (``getrusage`` ru_maxrss: KiB on Linux,
    bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)
