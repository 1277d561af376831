"""``AutoPlan``: the flat and the node-aware plan on the same ghosts, one picked per direction
and row width by the two-tier alpha-beta model (``tiers``) of each plan's per-rank volumes
(the slowest rank decides): the same decision on every rank, from numbers gathered once at
build time. ``exchange_plan`` builds the plan an algorithm's ``exchange=`` option asks for.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from ..backend.host import HOST
from ..backend.protocol import Backend
from ..local.codecs import Codec
from ..runtime.stats import CommStats
from . import tiers
from .halo import HaloPlan
from .node_exchange import NodePlan, peers
from .nodes import NodeMap
from .staged_plan import StagedPlan

EXCHANGES = ("flat", "node", "auto")


class AutoPlan:
    """Both plans on the same ghosts; each call runs the one the two-tier model
    (``tiers.NETWORKS[network]``) prices faster for its row width and codec, the slowest rank
    deciding. ``choices``: what was chosen, by direction and bytes per row."""

    exchange = "auto"

    def __init__(self, flat: HaloPlan, node: NodePlan, network: str | None = None):
        self.flat, self.node = flat, node
        self.net = tiers.network(network)
        self.comm, self.stats = flat.comm, flat.stats
        self.codec, self.codec_backward = flat.codec, flat.codec_backward
        self.ghost_ids, self.n_ghost, self.n_send = flat.ghost_ids, flat.n_ghost, flat.n_send
        self.send_idx, self.recv_counts, self.send_counts = (flat.send_idx, flat.recv_counts,
                                                             flat.send_counts)
        me, nodes = flat.comm.Get_rank(), flat.nodes
        other = np.ones(flat.comm.Get_size(), dtype=bool)
        other[me] = False
        near = nodes.same & other
        far = ~nodes.same
        row = [peers(flat.send_counts * near, flat.recv_counts * near, me),
               flat.send_counts[near].sum(), flat.recv_counts[near].sum(),
               peers(flat.send_counts * far, flat.recv_counts * far, me),
               flat.send_counts[far].sum(), flat.recv_counts[far].sum()]
        volumes = node.volumes()
        for _, m, s, r in volumes:
            row += [m, s, r]
        row += self._in_place_leg1(node, volumes[0])
        mine = np.array(row, dtype=np.float64)
        self.table = np.empty((flat.comm.Get_size(), mine.size), dtype=np.float64)
        flat.comm.Allgather(mine, self.table)
        self.node_of = nodes.node
        self.choices: dict[str, str] = {}
        self._chosen: dict[tuple, AutoPlan | HaloPlan | NodePlan] = {}

    @staticmethod
    def _in_place_leg1(node: NodePlan, leg1: tuple) -> list[float]:
        """Leg 1 of a bcast and of a reduce read in place (``GhostBlock`` on a node plan
        that ``reads_in_place``), as ``volumes`` rows (messages, rows copied, rows
        received): the window's synchronisation priced as leg 1's messages; the bcast
        copies each published row once into the window (not once per asker), the reduce
        copies nothing when its partial sums are made in the window (else my direct
        ghosts' partials); what the owners and readers then read in place is read as the
        flat plan reads its received rows, so it is not a copy. ``leg1``: leg 1's
        ``volumes`` row."""
        _, m, s, r = leg1
        if not node.reads_in_place:
            return [m, s, r, m, s, r]
        l1, me = node.leg1, node.comm_local.Get_rank()   # others only, as ``volumes``
        others = np.ones(l1.send_idx.size, dtype=bool)
        others[l1.send_displs[me]:l1.send_displs[me] + l1.send_counts[me]] = False
        back = 0 if node._partials_in_place else node.pos_direct.size
        return [m, np.unique(l1.send_idx[others]).size, 0, m, back, 0]

    def seconds(self, raw: int, coded: int, in_place: bool | None = None) -> tuple[float, float]:
        """(flat, node): the slowest rank's predicted seconds of one exchange with ``raw``
        bytes per uncompressed row and ``coded`` per row on the wire of a codec;
        ``in_place``: a bcast (True) or reduce (False) read in place (``_in_place_leg1``),
        None for one that copies its rows out of the node's windows."""
        t, net = self.table, self.net
        K = int(np.bincount(self.node_of).max())

        def inter(m, s, r):
            node = np.maximum(np.bincount(self.node_of, s)[self.node_of],
                              np.bincount(self.node_of, r)[self.node_of])
            return tiers.inter_seconds(net, m, np.maximum(s, r) * coded, node * coded, K)

        flat = np.maximum(tiers.intra_seconds(net, t[:, 0], np.maximum(t[:, 1], t[:, 2]) * coded),
                          inter(t[:, 3], t[:, 4], t[:, 5]))
        leg1 = 6 if in_place is None else 15 if in_place else 18
        node = (tiers.intra_seconds(net, t[:, leg1], np.maximum(t[:, leg1 + 1],
                                                                t[:, leg1 + 2]) * raw)
                + inter(t[:, 9], t[:, 10], t[:, 11])
                + tiers.intra_seconds(net, t[:, 12], np.maximum(t[:, 13], t[:, 14]) * raw))
        return float(flat.max(initial=0.0)), float(node.max(initial=0.0))

    def choose(self, forward: bool, x: np.ndarray):
        """The plan a call of this direction on ``x`` runs when the caller reads the node
        plan's rows in place (``ghost.GhostBlock``; the same on every rank)."""
        return self._pick(forward, x, self.node.reads_in_place)

    def _pick(self, forward: bool, x: np.ndarray, in_place: bool = False):
        codec = self.codec if forward else self.codec_backward
        raw = x.shape[1] * x.itemsize
        coded = raw if HaloPlan.passthrough(codec, x.dtype) else int(codec.row_bytes(x.shape[1]))
        key = (forward, raw, coded, in_place)
        if key not in self._chosen:
            flat, node = self.seconds(raw, coded, forward if in_place else None)
            self._chosen[key] = self.node if node < flat else self.flat
            label = (f"{'bcast' if forward else 'reduce'} {coded} B/row"
                     + (" in place" if in_place else ""))
            self.choices[label] = self._chosen[key].exchange
        return self._chosen[key]

    def buffer(self, name: str, rows: int, f: int, dtype, slot: int = 0) -> np.ndarray:
        return self.flat.buffer(name, rows, f, dtype, slot)

    def release_buffers(self) -> None:
        """Both plans' (``NodePlan.release_buffers``: collective over the node)."""
        self.flat.release_buffers()
        self.node.release_buffers()

    def send_volume(self) -> int:
        return self.flat.send_volume()

    def recv_volume(self) -> int:
        return self.flat.recv_volume()

    def start_bcast(self, x_local: np.ndarray, ghost: np.ndarray, key: int = 0, slot: int = 0):
        return self._pick(True, x_local).start_bcast(x_local, ghost, key, slot)

    def start_reduce(self, ghost_partial: np.ndarray, out_local: np.ndarray | None = None,
                     key: int = 0, slot: int = 0):
        return self._pick(False, ghost_partial).start_reduce(ghost_partial, out_local, key, slot)

    def bcast(self, x_local: np.ndarray, ghost: np.ndarray, key: int = 0) -> None:
        self.start_bcast(x_local, ghost, key).finish()

    def reduce(self, ghost_partial: np.ndarray, out_local: np.ndarray, key: int = 0) -> None:
        self.start_reduce(ghost_partial, out_local, key).finish()


def exchange_plan(exchange: str, comm: MPI.Comm, owner_offsets: np.ndarray,
                  ghost_ids: np.ndarray, stats: CommStats, codec: Codec | None = None,
                  codec_backward: Codec | None = None, seed: int = 0,
                  stream: int | None = None, nodes: NodeMap | None = None,
                  network: str | None = None, backend: Backend = HOST, link=None):
    """Collective: the plan ``exchange`` names ("flat", "node" or "auto") for these ghosts,
    on ``backend``'s arrays and ``link`` (the grid's transport for ``comm``). The node-aware
    plans keep their rows in MPI's windows and messages: on a backend whose arrays are not
    numpy they run on host copies (``StagedPlan``)."""
    args = (comm, owner_offsets, ghost_ids, stats, codec, codec_backward, seed, stream)
    nodes = NodeMap.shared(comm) if nodes is None else nodes
    if exchange == "flat":
        return HaloPlan(*args, nodes=nodes, backend=backend, link=link)
    plan = (NodePlan(*args, nodes=nodes) if exchange == "node" else
            AutoPlan(HaloPlan(*args, nodes=nodes), NodePlan(*args, nodes=nodes), network))
    return plan if backend.mpi_native else StagedPlan(plan, backend)
