"""Which node each rank sits on: the two tiers of a cluster (inside a node, between nodes).

Ranks are grouped into nodes by ``MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)`` (the ranks that
share memory), or, to simulate a cluster on one machine, by ``ranks_per_node=K``: consecutive
ranks K at a time, the last node smaller when K does not divide P (a real placement can give
unequal nodes too, so every exchange handles them). A node is numbered by the order of its
lowest rank, so with ``ranks_per_node=K`` rank r sits on node ``r // K``.

A ``NodeMap`` is the node of every rank of one communicator (a grid dimension's, or the
ranks across block rows): the exchanges split their bytes by tier with it, and the
node-aware exchange (``node_exchange``) routes rows through it.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from ..runtime.wire import allgather_json


def group_ranks(comm: MPI.Comm, ranks_per_node: int | None) -> tuple[np.ndarray, MPI.Comm]:
    """Collective: (the node of every rank of ``comm``, the communicator of my node's ranks
    ordered by rank). ``ranks_per_node`` None: the ranks that share memory."""
    rank = comm.Get_rank()
    if ranks_per_node is None:
        node_comm = comm.Split_type(MPI.COMM_TYPE_SHARED, key=rank)
        lowest = node_comm.allreduce(rank, op=MPI.MIN)
        leaders = np.array(allgather_json(comm, int(lowest)), dtype=np.int64)
        return np.searchsorted(np.unique(leaders), leaders).astype(np.int64), node_comm
    nodes = np.arange(comm.Get_size(), dtype=np.int64) // int(ranks_per_node)
    return nodes, comm.Split(color=int(nodes[rank]), key=rank)


def node_of_rank(P: int, ranks_per_node: int) -> np.ndarray:
    """The node of each of P ranks grouped K = ``ranks_per_node`` at a time (the model's
    grouping, the same as ``group_ranks``'s)."""
    return np.arange(P, dtype=np.int64) // max(1, int(ranks_per_node))


class NodeMap:
    """The node of every rank of ``comm`` (collective to build: one allgather of ``my_node``,
    this rank's node in the grid's numbering, so every communicator numbers nodes alike)."""

    def __init__(self, comm: MPI.Comm, my_node: int):
        self.comm = comm
        self.me = comm.Get_rank()
        self.node = np.array(allgather_json(comm, int(my_node)), dtype=np.int64)
        self.my_node = int(my_node)
        self.same = self.node == self.my_node     # the peers on my node (me included)
        self._local: MPI.Comm | None = None

    @property
    def size(self) -> int:
        return int(self.node.size)

    def members(self, node: int) -> np.ndarray:
        """The ranks of ``comm`` on ``node``, in rank order."""
        return np.flatnonzero(self.node == node)

    def local_comm(self) -> MPI.Comm:
        """Collective the first time: the ranks of ``comm`` on my node, ordered by rank in
        ``comm`` (rank i of it is ``members(my_node)[i]``)."""
        if self._local is None:
            self._local = self.comm.Split(color=self.my_node, key=self.me)
        return self._local

    @classmethod
    def shared(cls, comm: MPI.Comm) -> NodeMap:
        """Collective: the nodes of ``comm``'s ranks by shared memory (no grid at hand)."""
        nodes, node_comm = group_ranks(comm, None)
        node_comm.Free()
        return cls(comm, int(nodes[comm.Get_rank()]))


def carriers(group: np.ndarray, node: np.ndarray, owner: np.ndarray,
             to_node: np.ndarray | int) -> tuple[np.ndarray, np.ndarray]:
    """Who carries rows between nodes in the node-aware exchange: for rows owned by ranks
    ``owner`` bound for node ``to_node``, the rank of the owner's node that sends them
    (``s``) and the rank of ``to_node`` that receives them (``t``). ``group`` and ``node``
    give each rank its communicator (ranks of one group exchange with each other) and its
    node; the plans (one communicator: one group) and the volume model (every
    communicator of a grid at once) call this same function.

    The node pairs are spread over the node's ranks round robin (Bienz, Gropp and Olson's
    node-aware SpMV): pair (A, B) is carried by A's rank B mod |A| and B's rank A mod |B|.
    When a node has more ranks than there are other nodes, each pair gets
    ``L = |A| // (nodes - 1)`` lanes, an owner's rows taking lane ``its index in A mod L``, so
    the ranks of a node share the pairs instead of a few carrying all (with two nodes every
    owner sends its own rows: no gather inside A)."""
    node = np.asarray(node, dtype=np.int64)
    group = np.asarray(group, dtype=np.int64)
    owner = np.asarray(owner, dtype=np.int64)
    width = int(node.max(initial=0)) + 1
    key = group * width + node
    order = np.lexsort((np.arange(node.size), key))
    keys = key[order]
    index = np.empty(node.size, dtype=np.int64)
    index[order] = np.arange(node.size) - np.searchsorted(keys, keys)
    present = np.unique(keys)
    nodes_in = np.bincount(present // width, minlength=int(group.max(initial=0)) + 1)

    def ranks_of(k: np.ndarray):
        start = np.searchsorted(keys, k, side="left")
        return start, np.searchsorted(keys, k, side="right") - start

    frm, g = node[owner], group[owner]
    to = np.broadcast_to(np.asarray(to_node, dtype=np.int64), owner.shape)
    start_a, size_a = ranks_of(g * width + frm)
    start_b, size_b = ranks_of(g * width + to)
    lanes = np.maximum(1, size_a // np.maximum(1, nodes_in[g] - 1))
    lane = index[owner] % lanes
    s = order[start_a + (to * lanes + lane) % size_a]
    t = order[start_b + (frm * lanes + lane) % size_b]
    return s, t
