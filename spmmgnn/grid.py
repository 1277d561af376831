"""Process grids with named dimensions: the 1.5D ``P/c x c`` grid, and CAGNET's 2D and 3D.

Like a DTensor ``DeviceMesh``, a grid has named dimensions and one communicator along each
(``comm_along(dim)``: the ranks that differ only in that coordinate). Ranks are numbered
row-major over the coordinates.

* **1D / 1.5D** (``ProcessGrid(comm, replication=c)``, ``kind`` "1d" or "1.5d"): dimensions
  ``("block_row", "replica")`` of sizes (P/c, c). Rank r sits at block row ``r // c``, replica
  ``r % c``; ``across_block_rows`` (one rank per block row, all with my replica index) is where
  halo exchanges and block broadcasts happen, ``across_replicas`` (the c replicas of my block
  row) where 1.5D partial results are all-reduced.
* **2D** (``shape=(pr, pc)``, kind "2d"): dimensions ``("row", "col")``; rank (i, j) = i pc + j.
* **3D** (``shape=(pr, pc, pl)``, kind "3d"): dimensions ``("row", "col", "layer")``; rank
  (i, j, l) = (i pc + j) pl + l.

On a 2D or 3D grid every rank owns its own rows of the dense matrices (one part of a P-way
vertex partition, no replicas), so the row layout seen from outside is the 1D one:
``n_block_rows`` = P, ``block_row`` = rank, ``replication`` = 1, ``across_block_rows`` spans all
ranks. The 2D/3D algorithms use the dimension communicators inside (docs/algorithms/).

Every grid also knows its nodes (``spmmgnn.exchange.nodes``): ``node`` (my node), ``nodes`` (the
node of every rank), ``node_comm`` (my node's ranks) and ``node_map(comm)`` for any of its
communicators. By default a node is the ranks that share memory; ``ranks_per_node=K`` groups
consecutive ranks K at a time (a cluster simulated on one machine; the last node is smaller when
K does not divide P).

``device`` chooses the grid's backend (``spmmgnn.backend``), once: None the host backend
(numpy arrays, numba kernels); ``"cpu"``, ``"cuda"`` or ``"cuda:k"`` the torch backend, whose
operators take and return torch tensors on that device (``"cuda"``: GPU ``local rank mod
device count``, the local rank on the ranks sharing memory). ``grid.backend`` is that object.

``transport`` chooses how the operators' rows travel (``spmmgnn.exchange.transport``):
``"mpi"``, ``"torch"`` (``torch.distributed``: NCCL on a CUDA grid, Gloo otherwise, one process
group per communicator of the grid, bootstrapped from MPI) or ``"auto"`` (the default: NCCL on
a CUDA grid of more than one rank, MPI otherwise). ``grid.link(comm)`` is the transport of one
of the grid's communicators. Plan construction and the agreement collectives stay on MPI.
"""

from __future__ import annotations

import math

import numpy as np
from mpi4py import MPI

from .backend import backend_for
from .backend.device import device_kind, resolve_device
from .exchange.nodes import NodeMap, group_ranks
from .runtime.agreement import agree_on
from .runtime.errors import SpmmgnnError, agree
from .runtime.machine import shared_node

KINDS = ("1d", "1.5d", "2d", "3d")
TRANSPORTS = ("mpi", "torch", "auto")
DIMS_15D: tuple[str, ...] = ("block_row", "replica")
DIMS_BY_NDIM = {2: ("row", "col"), 3: ("row", "col", "layer")}


def parse_grid(text: str) -> tuple[int, ...]:
    """``"2x3"`` -> (2, 3), ``"2x2x2"`` -> (2, 2, 2) (the CLI's ``--grid``)."""
    parts = str(text).lower().replace("×", "x").split("x")
    try:
        shape = tuple(int(p) for p in parts)
    except ValueError:
        shape = ()
    if len(shape) not in (2, 3) or min(shape) < 1:
        raise ValueError(f"a grid is 2 or 3 positive integers joined by 'x' (2x3, 2x2x2), "
                         f"got {text!r}")
    return shape


def format_shape(shape) -> str:
    return "x".join(str(int(s)) for s in shape)


def factorizations(P: int, ndim: int) -> list[tuple[int, ...]]:
    """Every shape of ``ndim`` positive factors whose product is P (for error hints)."""
    if ndim == 1:
        return [(P,)]
    return [(d, *rest) for d in range(1, P + 1) if P % d == 0
            for rest in factorizations(P // d, ndim - 1)]


def near_square(P: int, ndim: int) -> tuple[int, ...]:
    """The shape of ``ndim`` factors of P closest to a square or cube; among equals the one
    with the most layers (3D), then the most process rows."""
    return min(factorizations(P, ndim), key=lambda s: (max(s) - min(s), -s[-1], -s[0]))


class ProcessGrid:
    """The MPI ranks of ``comm`` arranged as a named grid; construction is collective and every
    rank must ask for the same grid (else one error on every rank)."""

    def __init__(self, comm: MPI.Comm | None = None, replication: int = 1,
                 shape: tuple[int, ...] | None = None, ranks_per_node: int | None = None,
                 device: str | None = None, transport: str = "auto"):
        self.comm = MPI.COMM_WORLD if comm is None else comm
        size = self.comm.Get_size()
        c, K = replication, ranks_per_node
        error = None
        if not isinstance(c, int) or isinstance(c, bool) or c < 1:
            error = f"replication must be a positive integer, got {c!r}"
        elif K is not None and (not isinstance(K, int) or isinstance(K, bool)
                                or not 1 <= K < 2**31):
            error = f"ranks_per_node must be a positive integer below 2**31 (or None: by " \
                    f"shared memory), got {K!r}"
        elif transport not in TRANSPORTS:
            error = f"transport must be one of {', '.join(TRANSPORTS)}, got {transport!r}"
        elif shape is not None:
            error = _shape_error(shape, c, size)
        elif size % c != 0:
            error = (f"replication c={c} does not divide the number of ranks P={size}: "
                     f"the grid is P/c x c, so choose c among the divisors of {size}")
        # a different grid on some rank would split the world inconsistently (first: a
        # difference explains a bad value on one rank)
        agree_on(self.comm, dict(replication=c, shape=_shape_text(shape), ranks_per_node=K,
                                 transport=transport, device=device_kind(device)), "the grid")
        agree(self.comm, error)
        self.rank = self.comm.Get_rank()
        self.size = size
        if shape is None:
            self.kind = "1d" if c == 1 else "1.5d"
            self.dims = DIMS_15D
            self._shape: tuple[int, ...] = (size // c, c)
            self.replication = c
        else:
            self._shape = tuple(int(s) for s in shape)
            self.kind = f"{len(self._shape)}d"
            self.dims = DIMS_BY_NDIM[len(self._shape)]
            self.replication = 1
        self.coords = _coords(self.rank, self._shape)
        self._along = {dim: self._split_along(k) for k, dim in enumerate(self.dims)}
        if shape is None:
            self.block_row, self.replica = self.coords
            self.across_block_rows = self._along["block_row"]
            self.across_replicas = self._along["replica"]
        else:  # every rank owns one part of the rows: the 1D row layout over all ranks
            self.block_row, self.replica = self.rank, 0
            self.across_block_rows = self.comm.Split(color=0, key=self.rank)
            self.across_replicas = self.comm.Split(color=self.rank, key=0)
        self.ranks_per_node = K
        self.nodes, self.node_comm = group_ranks(self.comm, K)
        self.node = int(self.nodes[self.rank])
        self.n_nodes = int(self.nodes.max()) + 1
        self._node_maps: list[tuple[MPI.Comm, NodeMap]] = []
        # (rows on this rank, rows in all) of each side of every operator built on this
        # grid: what a table of this rank's rows looks like (nn.allreduce_gradients)
        self.row_counts: set[tuple[int, int]] = set()
        self.device = _device(device, self.comm, self.node_comm, K)
        self.backend = backend_for(self.device, self.comm)
        self.transport = _transport(transport, self)

    def link(self, comm: MPI.Comm):
        """The transport of ``comm``, one of this grid's communicators (``comm``, its
        dimensions, ``across_block_rows``, ``across_replicas``)."""
        return self.transport.link(comm)

    def communicators(self) -> list[MPI.Comm]:
        """This grid's communicators, the whole grid first, each once."""
        out: list[MPI.Comm] = []
        for c in (self.comm, self.across_block_rows, self.across_replicas,
                  *self._along.values()):
            if not any(c is o for o in out):
                out.append(c)
        return out

    def node_map(self, comm: MPI.Comm) -> NodeMap:
        """Collective over ``comm`` (one of this grid's communicators) the first time: the
        node of each of its ranks, in the grid's node numbering."""
        for known, nodes in self._node_maps:
            if known is comm:
                return nodes
        nodes = NodeMap(comm, self.node)
        self._node_maps.append((comm, nodes))
        return nodes

    @property
    def block_rows_per_node(self) -> int:
        """Block rows of the dense matrices on one node (the largest): the ranks per node
        over the replication c (a two-level partition's parts per node)."""
        per_node = self.ranks_per_node or int(np.bincount(self.nodes).max())
        return max(1, per_node // self.replication)

    def node_label(self) -> str:
        """``4 ranks/node`` (simulated), or ``nodes by shared memory`` (run headers)."""
        if self.ranks_per_node is not None:
            return f"{self.ranks_per_node} ranks/node ({self.n_nodes} nodes)"
        return f"{self.n_nodes} node(s) by shared memory"

    def _split_along(self, k: int) -> MPI.Comm:
        """The ranks whose coordinates equal mine except the k-th, ordered by the k-th."""
        color = 0
        for d, (x, s) in enumerate(zip(self.coords, self._shape, strict=True)):
            if d != k:
                color = color * s + x
        return self.comm.Split(color=color, key=self.coords[k])

    def comm_along(self, dim: str) -> MPI.Comm:
        """The communicator along grid dimension ``dim``: the ranks that differ from me only in
        that coordinate, ordered by it (DeviceMesh's ``get_group(dim)``)."""
        if dim not in self._along:
            raise ValueError(f"grid dimensions are {self.dims}, got {dim!r}")
        return self._along[dim]

    @property
    def shape(self) -> tuple[int, ...]:
        """The size of each dimension, in the order of ``dims``."""
        return self._shape

    @property
    def n_block_rows(self) -> int:
        """How many row blocks the dense matrices are split into: P/c (P on a 2D/3D grid)."""
        return self.size // self.replication

    def rank_of(self, *coords: int) -> int:
        """The rank at these coordinates (row-major); SpmmgnnError (this rank's own) for
        coordinates outside the grid."""
        if len(coords) != len(self._shape) or not all(
                isinstance(x, (int, np.integer)) and not isinstance(x, bool) and 0 <= x < s
                for x, s in zip(coords, self._shape, strict=False)):
            raise SpmmgnnError(f"coordinates {coords} are outside the {format_shape(self._shape)}"
                             f" grid (dimensions {self.dims}): give {len(self._shape)} integers,"
                             f" each in [0, size)")
        r = 0
        for x, s in zip(coords, self._shape, strict=True):
            r = r * s + int(x)
        return r

    def label(self) -> str:
        """``c=2`` for a 1.5D grid, ``grid=2x3`` for 2D/3D (run headers and reports)."""
        return f"c={self.replication}" if self.kind in ("1d", "1.5d") else \
            f"grid={format_shape(self._shape)}"

    def __repr__(self) -> str:
        where = ", ".join(f"{d} {x}" for d, x in zip(self.dims, self.coords, strict=True))
        return f"ProcessGrid(P={self.size}, {self.label()}, rank={self.rank} at ({where}))"


def _device(spec, comm: MPI.Comm, node_comm: MPI.Comm, ranks_per_node: int | None):
    """The grid's torch device (None: numpy); GPUs are shared among the ranks of a real
    node (shared memory), also when ``ranks_per_node`` simulates smaller nodes."""
    if ranks_per_node is None:
        return resolve_device(spec, comm, node_comm)
    with shared_node(comm) as shared:
        return resolve_device(spec, comm, shared)


def _transport(spec, grid: ProcessGrid):
    """Collective: the grid's transport for ``transport=spec`` (every rank asked for the same,
    checked with the grid's other arguments)."""
    from .exchange.transport import MpiTransport

    name = grid.backend.default_transport(grid.size) if spec == "auto" else spec
    if name == "mpi":
        return MpiTransport(grid.backend)
    from .exchange.torch_transport import TorchTransport

    return TorchTransport(grid.communicators(), grid.backend)


def _coords(rank: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    out = []
    for s in reversed(shape):
        rank, x = divmod(rank, s)
        out.append(x)
    return tuple(reversed(out))


def _shape_text(shape) -> object:
    """A grid shape as the ranks compare it: ``2x3``, or the value given when it is not a
    sequence of integers (its own error says why)."""
    try:
        return format_shape(shape) if shape is not None else None
    except (TypeError, ValueError):
        return shape


def _shape_error(shape, c: int, size: int) -> str | None:
    try:
        dims = tuple(int(s) for s in shape)
        ok = all(int(s) == s and not isinstance(s, (bool, np.bool_, str)) for s in shape)
    except (TypeError, ValueError):
        dims, ok = (), False
    if not ok or len(dims) not in (2, 3) or min(dims) < 1:
        return (f"a grid shape is 2 or 3 positive integers, (pr, pc) or (pr, pc, pl), got "
                f"{shape!r}; 1D and 1.5D grids are replication=c")
    if c != 1:
        return (f"replication={c} is the 1.5D grid; a {len(dims)}D grid takes shape= only "
                "(its ranks hold no replicas)")
    if math.prod(dims) != size:
        some = ", ".join(format_shape(s) for s in factorizations(size, len(dims))[:6])
        return (f"the grid {format_shape(dims)} has {math.prod(dims)} ranks but P={size}: "
                f"choose {len(dims)} factors whose product is {size} (e.g. {some})")
    return None
