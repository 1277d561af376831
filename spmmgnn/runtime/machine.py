"""What the machine has and what this process uses: the last-level cache, node memory,
the ranks sharing the node, peak resident memory (the one home of these probes), and the
memory preflight: ``check_memory`` before an allocation whose size a flag or a file decides."""

from __future__ import annotations

import os
import resource
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mpi4py import MPI

# bytes the memory preflights take as available instead of probing (a user sharing the node
# with other jobs; tests of the refusal paths)
MEMORY_ENV = "SPMMGNN_AVAILABLE_MEMORY"


def available_bytes() -> int | None:
    """Memory available on this node (``SPMMGNN_AVAILABLE_MEMORY`` bytes if set, else
    ``/proc/meminfo`` MemAvailable, or sysconf), or None."""
    from .settings import env_setting

    forced = env_setting(MEMORY_ENV)
    if forced is not None:
        return int(forced)
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


def _cpu_times() -> tuple[int, int] | None:
    """(busy, total) jiffies of all cores since boot (``/proc/stat``), or None."""
    try:
        with open("/proc/stat") as fh:
            fields = [int(x) for x in fh.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = sum(fields[3:5])  # idle + iowait
    return sum(fields) - idle, sum(fields)


def core_times(cores: set[int] | None = None) -> tuple[int, int] | None:
    """(busy, total) jiffies since boot of ``cores`` (``/proc/stat``'s ``cpuN`` lines; all
    cores if None), or None where unknown. One read of a small file: ~20 us on 2 cores."""
    try:
        with open("/proc/stat") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    busy = total = 0
    for line in lines:
        if not line.startswith("cpu") or line[3:4] == " ":
            continue
        name, *fields = line.split()
        if not name[3:].isdigit():
            break  # the cpuN lines come first
        if cores is not None and int(name[3:]) not in cores:
            continue
        values = [int(x) for x in fields[:8]]  # guest time is already inside user time
        total += sum(values)
        busy += sum(values) - values[3] - values[4]  # less idle and iowait
    return (busy, total) if total else None


def idle_cores(cores: int, interval: float = 0.1) -> float | None:
    """How many of ``cores`` were idle over the next ``interval`` seconds (``/proc/stat``:
    the machine's busy share times ``cores``, this process sleeping meanwhile), or None where
    unknown. A user's machine is rarely idle: threaded partitioners oversubscribed by another
    process's busy core slow down by far more than the core they lose."""
    import time

    a = _cpu_times()
    if a is None:
        return None
    time.sleep(interval)
    b = _cpu_times()
    if b is None or b[1] <= a[1]:
        return None
    busy = (b[0] - a[0]) / (b[1] - a[1]) * (os.cpu_count() or cores)
    return max(0.0, min(float(cores), (os.cpu_count() or cores) - busy))


def format_bytes(n: float, digits: int = 1) -> str:
    """``1.5 GiB``, ``12.0 MiB``, ``512 B`` (``digits`` decimals)."""
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:,.{digits}f} {unit}"
    return f"{int(n):,} B"


def format_bytes_apart(a: float, b: float, *more: float) -> list[str]:
    """``a``, ``b`` and ``more`` by ``format_bytes``, with the decimals (1 to 3) that tell
    ``a`` from ``b`` when they differ, else in bytes: "needs 1.1 MiB > 1.0 MiB" or "1.03 MiB
    > 1.02 MiB", never "needs 0.00 GiB > 0.00 GiB"."""
    for digits in (1, 2, 3):
        out = [format_bytes(v, digits) for v in (a, b, *more)]
        if out[0] != out[1] or a == b:
            return out
    return [f"{int(v):,} B" for v in (a, b, *more)]


def memory_problem(need: float, what: str, ranks: int = 1,
                   node_need: float | None = None) -> str | None:
    """The one-line refusal of ``what`` when it needs more than ``need`` bytes on each of
    ``ranks`` ranks of this node than the node has available (None: it fits, or the
    available memory is unknown). ``node_need``: what the node's ranks need together when
    their needs differ (``node_total``: a rank holding many more rows than the others must
    not stand for all of them); default ``need`` x ``ranks``."""
    have = available_bytes()
    total = need * ranks if node_need is None else node_need
    if have is None or total <= have:
        return None
    if total != need * ranks:
        total_text, have_text, need_text = format_bytes_apart(total, have, need)
        return (f"{what} needs about {need_text} on this rank and {total_text} for the "
                f"{ranks} ranks on this node, and this node has {have_text} available")
    per = f" per rank x {ranks} ranks on this node" if ranks > 1 else ""
    total_text, have_text, need_text = format_bytes_apart(total, have, need)
    return (f"{what} needs about {need_text}{per} and this node has {have_text} available")


def check_memory(need: float, what: str, ranks: int = 1) -> None:
    """SpmmgnnError (``memory_problem``) before allocating ``need`` bytes; not collective."""
    from .errors import SpmmgnnError

    problem = memory_problem(need, what, ranks)
    if problem:
        raise SpmmgnnError(problem)


def peak_rss_bytes() -> int:
    """This process's peak resident memory so far (``getrusage`` ru_maxrss: KiB on Linux,
    bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def llc_bytes() -> int:
    """Size of the largest (last-level) CPU cache in bytes: ``$SPMMGNN_LLC_BYTES`` if set,
    else from sysfs; 32 MiB if unknown."""
    from .settings import env_setting

    forced = env_setting("SPMMGNN_LLC_BYTES")
    if forced is not None:
        return int(forced)
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


@contextmanager
def shared_node(comm: MPI.Comm) -> Iterator[MPI.Comm]:
    """Collective: the communicator of the ranks of ``comm`` that share this rank's memory
    (``MPI_Comm_split_type(SHARED)``, in ``comm``'s rank order), freed on leaving."""
    node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    try:
        yield node
    finally:
        node.Free()


def node_total(comm: MPI.Comm, value: int) -> tuple[int, int]:
    """Collective: the sum of ``value`` over the ranks of ``comm`` on this node, and how
    many they are."""
    with shared_node(comm) as node:
        return int(node.allreduce(int(value), op=MPI.SUM)), node.Get_size()


def ranks_on_this_node(comm: MPI.Comm = MPI.COMM_WORLD) -> int:
    """Number of ranks of ``comm`` that share this node (collective)."""
    with shared_node(comm) as node:
        return node.Get_size()
