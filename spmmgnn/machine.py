"""What the machine has and what this process uses: the last-level cache, node memory,
the ranks sharing the node, peak resident memory (the one home of these probes)."""

from __future__ import annotations

import os
import resource
import sys
from pathlib import Path

from mpi4py import MPI


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


def llc_bytes() -> int:
    """Size of the largest (last-level) CPU cache in bytes, from sysfs; 32 MiB if unknown."""
    best = 0
    for d in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (d / "size").read_text().strip().upper()
        except OSError:
            continue
        scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            best = max(best, int(digits) * scale)
    return best or 32 * 2**20


def ranks_on_this_node(comm: MPI.Comm = MPI.COMM_WORLD) -> int:
    """Number of ranks of ``comm`` that share this node (collective)."""
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        return node.Get_size()
    finally:
        node.Free()
