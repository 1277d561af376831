"""The default layout of a node: threads per rank from the node's cores and NUMA domains.

The ranks per node are fixed by the launcher; what a run chooses is the threads of each rank
(``threads.default_threads``: its fair share of the cores it may run on, ``$SPMMGNN_THREADS``
if set). ``choose_layout`` adds what the node looks like (its cores, the NUMA domains of
``/sys/devices/system/node`` holding them) so ``spmmgnn train`` can say what it chose in one
line, with a hint when the ranks do not match the domains (DistGNN and SuperGCN run one rank
per socket with threads inside: a rank spanning domains reads remote memory).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mpi4py import MPI

from .machine import shared_node
from .threads import affinity, default_threads
from .wire import allgather_json

NUMA_ROOT = Path("/sys/devices/system/node")


def parse_cpulist(text: str) -> set[int]:
    """``"0-3,8,10-11"`` -> {0, 1, 2, 3, 8, 10, 11} (the kernel's cpulist format)."""
    out: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def numa_domains(cores: set[int], root: Path = NUMA_ROOT) -> list[set[int]]:
    """The NUMA domains holding any of ``cores``, each as its cores among them; one domain
    of all of them when sysfs shows none."""
    found = []
    for node in sorted(root.glob("node[0-9]*")) if root.is_dir() else []:
        try:
            mine = parse_cpulist((node / "cpulist").read_text()) & cores
        except (OSError, ValueError):
            continue
        if mine:
            found.append(mine)
    return found or [set(cores)]


@dataclass(frozen=True)
class NodeLayout:
    """What a rank runs with on its node."""

    ranks_per_node: int
    threads: int        # threads per rank
    cores: int          # cores the node's ranks may run on (the union of their affinity)
    numa: int           # NUMA domains among those cores

    def line(self) -> str:
        """One line for rank 0 to print."""
        used = self.ranks_per_node * self.threads
        text = (f"node layout: {self.ranks_per_node} rank(s)/node x {self.threads} "
                f"thread(s)/rank = {used} of {self.cores} cores, {self.numa} NUMA domain(s)")
        if self.numa > 1 and self.ranks_per_node % self.numa:
            text += f" (hint: a multiple of {self.numa} ranks per node keeps memory local)"
        return text


def choose_layout(comm: MPI.Comm = MPI.COMM_WORLD) -> NodeLayout:
    """Collective: the threads per rank (``threads.default_threads``) and the node around
    them. Changes nothing; ``threads.set_threads(layout.threads)`` applies it."""
    threads = default_threads(comm)
    with shared_node(comm) as node:
        cores = set().union(*map(set, allgather_json(node, sorted(affinity()))))
        ranks = node.Get_size()
    return NodeLayout(ranks, threads, len(cores), len(numa_domains(cores)))
