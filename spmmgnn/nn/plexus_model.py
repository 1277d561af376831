"""GCN training as Plexus runs it (Ranjan et al., SC'25): every product of the layer on the
3D grid, the activations kept in the grid's blocks from layer to layer.

Our reading (docs/algorithms/plexus3d.md, "Training in the blocks"): one random permutation
``pos`` of the vertices (``plexus3d``'s row permutation) cut into X Z blocks; rank
(x, y, z) keeps block ``b = z X + x`` of every activation, features ``F_y``: the layout
``V`` that ``Plexus3D``'s ``A X`` leaves its result in. Two tiles of A take ``V`` to ``V``:

* ``T0 = A[R_z, C_x]`` (rows: blocks ``z X + x'``, columns: blocks ``z' X + x``): all-gather
  along z, multiply, reduce-scatter along x (``plexus3d``'s ``A X``);
* ``T1 = A[R'_x, C'_z]`` (rows: blocks ``z' X + x``, columns: blocks ``z X + x'``): the same
  with x and z swapped.

Layer l uses ``T(l mod 2)``: the rotation of the grid axes between layers, so no layer
converts its input or output. The GEMM ``H W`` runs in ``V`` too: ``H[b, F_y] W[F_y, :]``
reduce-scattered along y by output column blocks ``G_y``. W is replicated (it is
``f_in x f_out``); its gradient sums over all ranks like the row layout's. Only the input
features (once, constant) and the final logits (each pass) convert between the row layout
and ``V`` (``bytes_sent_by_phase["convert"]``).

Blocked aggregation (Plexus's): the tile's rows in ``row_blocks`` blocks, block k holding
the k-th slice of every destination block of the reduce-scatter; block k's reduce-scatter
is started (``Ireduce_scatter``) before block k + 1's product, so each block's reduction
overlaps the next block's multiply. The same terms are summed: ``row_blocks`` changes the
results at most by MPI's reduction order (not at all on 2 ranks per axis).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ..algorithms.plexus3d import Plexus3D, plexus_orders
from ..algorithms.tiles import local_csr, redistribute
from ..runtime.errors import collective_error
from ..stages import stage_ranges
from .layers import aggregate_first
from .memory import BlockPlace
from .models import GNN


def _bounds(sizes: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


class PlexusTile:
    """One tile of A taking layout ``V`` to ``V``: gather along ``gather``, multiply,
    reduce-scatter along ``reduce`` in row blocks (the transpose: the other way round)."""

    def __init__(self, op: Plexus3D, m, gather: tuple, reduce: tuple,
                 c_bounds: np.ndarray, r_bounds: np.ndarray, row_blocks: int):
        self.op, self.be = op, op.grid.backend
        (self.gather, self.gather_far), (self.reduce, self.reduce_far) = gather, reduce
        self.c_bounds, self.r_bounds = c_bounds, r_bounds
        # row block k: slice k of every destination block, the blocks in rank order
        K = max(1, int(row_blocks))
        sizes = np.diff(r_bounds)
        cuts = np.stack([stage_ranges(int(s), K) for s in sizes])      # (D, K + 1)
        self.counts = np.diff(cuts, axis=1).T.astype(np.int64)         # (K, D)
        me = self.reduce.Get_rank()
        self.mine = cuts[me]                                            # my block's slices
        starts = r_bounds[:-1, None] + cuts[:, :-1]                     # (D, K)
        pieces = [np.arange(starts[d, k], starts[d, k] + self.counts[k, d])
                  for k in range(K) for d in range(sizes.size)]
        self.perm = np.concatenate(pieces).astype(np.int64) if pieces else \
            np.zeros(0, np.int64)
        self.block_bounds = _bounds(self.counts.sum(axis=1))
        m = m[self.perm]
        indptr, indices, data = (m.indptr.astype(np.int64), m.indices.astype(np.int32),
                                 m.data.astype(np.float64))
        self.nnz = int(m.nnz)
        shape = (int(indptr.size - 1), int(c_bounds[-1]))
        self.whole = self.be.tile(indptr, indices, data, shape)   # for the transpose
        self.blocks = []                                         # row block k's rows
        for k in range(K):
            r0, r1 = int(self.block_bounds[k]), int(self.block_bounds[k + 1])
            lo, hi = int(indptr[r0]), int(indptr[r1])
            self.blocks.append(None if hi == lo else self.be.tile(
                indptr[r0:r1 + 1] - lo, indices[lo:hi], data[lo:hi], (r1 - r0, shape[1])))

    def _multiply(self, h, k: int):
        """Row block k of ``T H`` (zeros where it holds no non-zero)."""
        be = self.be
        r0, r1 = int(self.block_bounds[k]), int(self.block_bounds[k + 1])
        part = be.zeros((r1 - r0, h.shape[1]), be.dtype(h))
        if h.shape[1] and self.blocks[k] is not None:
            with self.op.stats.timing("seconds_multiply"):
                self.blocks[k].matmul(h, part, True)
        return part

    def _count_reduce(self, counts: np.ndarray, w: int, itemsize: int) -> None:
        """Bytes of one reduce-scatter of ``counts`` rows (as ``Plexus3D.reduce_scatter``)."""
        me, far = self.reduce.Get_rank(), self.reduce_far
        row = w * itemsize
        own = int(counts[me]) * row
        self.op.stats.count_exchange(int(counts.sum()) * row - own,
                                     own * (self.reduce.Get_size() - 1), 0,
                                     int(counts[far].sum()) * row, own * int(far.sum()))

    def apply(self, h):
        """``T H`` in ``V``: gather my column group, then block by block: multiply, post
        its reduce-scatter (the grid's link), go on to the next block while it runs."""
        op, be = self.op, self.be
        full = op.all_gather(self.gather, be.contiguous(h), self.c_bounds, self.gather_far)
        w, dtype = h.shape[1], be.dtype(h)
        mine = be.empty((int(self.mine[-1]), w), dtype)
        link = op.grid.link(self.reduce)
        requests, keep = [], []
        for k in range(self.counts.shape[0]):
            part = self._multiply(full, k)
            recv = mine[self.mine[k]:self.mine[k + 1]]
            counts = self.counts[k]
            requests.append(link.ireduce_scatter(part, recv, counts * w, op.stats,
                                                 f"plexus{k}"))
            keep.append(part)
            self._count_reduce(counts, w, dtype.itemsize)
        with op.stats.timing("seconds_exchange"):
            for request in requests:
                request.Wait()
        return mine

    def apply_t(self, g):
        """``T^T G`` in ``V``: gather along the reduce axis, multiply by the transposed tile,
        reduce-scatter along the gather axis."""
        op, be = self.op, self.be
        gathered = op.all_gather(self.reduce, be.contiguous(g), self.r_bounds,
                                 self.reduce_far)
        w, dtype = g.shape[1], be.dtype(g)
        full = be.empty((self.perm.size, w), dtype)
        be.gather_rows(gathered, self.perm, full)
        part = be.zeros((int(self.c_bounds[-1]), w), dtype)
        if w and self.nnz:
            with op.stats.timing("seconds_multiply"):
                self.whole.t_matmul(full, part, True)
        return op.reduce_scatter(self.gather, part, self.c_bounds, self.gather_far)


def tile_entries(op: Plexus3D) -> tuple[np.ndarray, np.ndarray, np.ndarray, list]:
    """My share of A's non-zeros in V's numbering (rows, columns, values: every non-zero
    once, the Y copies of plexus3d's tile split it; the tile's columns go from the column
    permutation to the row one) and, per tile T0, T1, the rank of each of its Y copies."""
    X, Y, Z = op.grid.shape
    x, y, z = op.grid.coords
    row_pos, col_pos = plexus_orders(op.m, op.n, op.permute_seed)
    indptr, indices, data = op.tile
    keep = np.arange(indices.size) % Y == y
    rows = np.repeat(np.arange(indptr.size - 1, dtype=np.int64), np.diff(indptr))[keep]
    pr = rows + int(op.row_bounds[z * X])
    col_of = np.empty(op.n, dtype=np.int64)
    col_of[col_pos] = np.arange(op.n)
    pc = row_pos[col_of[indices[keep].astype(np.int64) + int(op.col_bounds[x * Z])]]
    bi = np.searchsorted(op.row_bounds, pr, side="right") - 1
    bj = np.searchsorted(op.row_bounds, pc, side="right") - 1
    dests = []
    for t in (0, 1):
        # T0 lies on rank (x = column group, z = row group), T1 the other way round
        hx, hz = (bj % X, bi // X) if t == 0 else (bi % X, bj // X)
        dests.append(((hx[:, None] * Y + np.arange(Y)) * Z + hz[:, None]).ravel())
    return pr, pc, data[keep], dests


def block_place(op: Plexus3D) -> BlockPlace:
    """Collective: where this rank keeps its activations and tiles in layout V
    (``nn.memory.BlockPlace``: the memory preflight), the tiles' non-zeros counted as they
    will arrive (one ``Alltoall`` of counts per tile) before any is built."""
    X, Y, Z = op.grid.shape
    x, y, z = op.grid.coords
    sizes = np.diff(op.row_bounds)
    lines = (int(sizes[z * X:(z + 1) * X].sum()), int(sizes[x::X].sum()))   # T0, T1 rows
    comm, counts = op.grid.comm, []
    for dest in tile_entries(op)[3]:
        send = np.bincount(dest, minlength=comm.Get_size()).astype(np.int64)
        recv = np.empty_like(send)
        comm.Alltoall(send, recv)
        counts.append(int(recv.sum()))
    return BlockPlace("plexus", op.n_local, int(sizes[z * X + x]), Y, y, lines,
                      tuple(counts), lines)


class PlexusPlan:
    """Everything that depends on the pattern: layout ``V``, both tiles, the vertex ids of
    my block (the dropout masks are keyed by them), the feature axis' communicator."""

    def __init__(self, op: Plexus3D, vertex_ids: np.ndarray, row_blocks: int = 1):
        grid = op.grid
        X, Y, Z = grid.shape
        x, y, z = grid.coords
        self.op, self.shape, self.y = op, (X, Y, Z), y
        self.along_y = grid.comm_along("col")
        self.far_y = ~grid.node_map(self.along_y).same
        pr, pc, values, dests = tile_entries(op)
        self.tiles = []
        for t, dest in enumerate(dests):
            got = redistribute(grid.comm, tuple(np.repeat(a, Y) for a in (pr, pc, values)),
                               dest)
            self.tiles.append(self._tile(got, t, row_blocks))
        # the ids of my block: one id column per feature block, so every y gets one
        be = grid.backend
        ids = np.repeat(np.asarray(vertex_ids, dtype=np.float64)[:, None], Y, axis=1)
        ids = be.to_host(op.rows.to_blocks(be.from_host(ids)))[:, 0].astype(np.int64)
        self.n_block = ids.size
        self.vertex_ids = be.vertex_ids(ids)

    def _tile(self, coo: tuple, t: int, row_blocks: int) -> PlexusTile:
        """The local CSR of tile T_t; rows and columns numbered in the order the
        reduce-scatter and the all-gather lay their blocks out."""
        op, (X, _, Z) = self.op, self.shape
        x, _, z = op.grid.coords
        bounds = op.row_bounds
        sizes = np.diff(bounds)
        along_x, along_z = (op.along_x, op.far_x), (op.along_z, op.far_z)
        if t == 0:   # rows: blocks z X + x' (x' = 0..X-1); columns: z' X + x (z' = 0..Z-1)
            row_group, col_group, gather, reduce = (z * X + np.arange(X), np.arange(Z) * X + x,
                                                    along_z, along_x)
        else:        # rows: blocks z' X + x; columns: z X + x'
            row_group, col_group, gather, reduce = (np.arange(Z) * X + x, z * X + np.arange(X),
                                                    along_x, along_z)
        r_bounds, c_bounds = _bounds(sizes[row_group]), _bounds(sizes[col_group])
        pr, pc, v = coo

        def local(pos: np.ndarray, group: np.ndarray, gb: np.ndarray) -> np.ndarray:
            shift = np.zeros(sizes.size, dtype=np.int64)     # block -> index shift
            shift[group] = gb[:-1] - bounds[group]
            return pos + shift[np.searchsorted(bounds, pos, side="right") - 1]

        m = local_csr(local(pr, row_group, r_bounds), local(pc, col_group, c_bounds), v,
                      (int(r_bounds[-1]), int(c_bounds[-1])))
        return PlexusTile(op, m, gather, reduce, c_bounds, r_bounds, row_blocks)

    def feature_block(self, f: int) -> tuple[int, int]:
        """My columns ``F_y`` of an ``f``-wide activation."""
        b = stage_ranges(f, self.shape[1])
        return int(b[self.y]), int(b[self.y + 1])

    def gemm(self, h: np.ndarray, w: np.ndarray) -> np.ndarray:
        """``(H W)[b, G_y]`` from ``H[b, F_y]`` and my rows ``W[F_y, :]``: reduce-scatter of
        the partial product along y by output column blocks."""
        be = self.op.grid.backend
        part = be.contiguous((h @ w).T)                           # (G, rows)
        out = self.op.reduce_scatter(self.along_y, part, stage_ranges(w.shape[1],
                                                                      self.shape[1]),
                                     self.far_y)
        return be.contiguous(out.T)

    def gather_columns(self, g: np.ndarray, f: int) -> np.ndarray:
        """``G[b, :]`` from my columns ``G[b, G_y]`` (all-gather along y)."""
        be = self.op.grid.backend
        full = self.op.all_gather(self.along_y, be.contiguous(g.T),
                                  stage_ranges(f, self.shape[1]), self.far_y)
        return be.contiguous(full.T)


class _Aggregate(torch.autograd.Function):
    """``T H`` in layout V; backward ``T^T G``."""

    @staticmethod
    def forward(ctx, h: torch.Tensor, tile: PlexusTile) -> torch.Tensor:
        ctx.tile = tile
        return tile.be.as_torch(tile.apply(tile.be.of_tensor(h)))

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        be = ctx.tile.be
        return be.as_torch(ctx.tile.apply_t(be.of_tensor(grad.contiguous()))), None


class _Gemm(torch.autograd.Function):
    """``(H W)[b, G_y]`` from ``H[b, F_y]`` (W replicated): one reduce-scatter along y;
    backward: the all-gather of the gradient's columns, then two local products (the
    weight gradient of my rows ``F_y``, summed over all ranks with the others)."""

    @staticmethod
    def forward(ctx, h: torch.Tensor, w: torch.Tensor, plan: PlexusPlan) -> torch.Tensor:
        a, b = plan.feature_block(w.shape[0])
        ctx.plan, ctx.rows = plan, (a, b)
        ctx.save_for_backward(h, w)
        be = plan.op.grid.backend
        return be.as_torch(plan.gemm(be.of_tensor(h), be.of_tensor(w[a:b])))

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        h, w = ctx.saved_tensors
        a, b = ctx.rows
        be = ctx.plan.op.grid.backend
        g = be.as_torch(ctx.plan.gather_columns(be.of_tensor(grad.contiguous()), w.shape[1]))
        grad_w = torch.zeros_like(w)
        grad_w[a:b] = h.T @ g
        return g @ w[a:b].T, grad_w, None


class _ToRows(torch.autograd.Function):
    """The logits from V to the row layout (the ``convert`` phase); backward: to V."""

    @staticmethod
    def forward(ctx, h: torch.Tensor, plan: PlexusPlan, f: int) -> torch.Tensor:
        ctx.plan = plan
        be = plan.op.grid.backend
        hb = be.of_tensor(h)
        out = be.empty((plan.op.n_local, f), be.dtype(hb))
        plan.op.rows.to_rows(hb, out)
        return be.as_torch(out)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        be = ctx.plan.op.grid.backend
        return be.as_torch(ctx.plan.op.rows.to_blocks(be.of_tensor(grad.contiguous()))), \
            None, None


def _row_blocks_problem(op: Plexus3D, row_blocks: int) -> str | None:
    """Why ``row_blocks`` is too many (None: it is not): a row block slices every vertex
    block, so beyond the rows of the largest one the blocks are empty, each still a message
    and a slot in arrays of ``row_blocks`` entries (2**31 of them: 16 GiB)."""
    X, Y, Z = op.grid.shape
    most = max(1, int(np.diff(op.row_bounds).max(initial=0)))
    if row_blocks <= most:
        return None
    return (f"takes 1 to {most} row blocks (--plexus-blocks) here, got {row_blocks}: a row "
            f"block slices each vertex block, and the largest holds {most} rows (n = {op.n} "
            f"in X Z = {X * Z} blocks of the {X}x{Y}x{Z} grid)")


class PlexusGCN(nn.Module):
    """A ``GNN`` (GCN, no LayerNorm, no labels as input) trained in Plexus's layout V:
    same parameters (``convs``; the state dict and checkpoints are the row model's), same
    dropout masks, logits returned in the row layout for the trainer's loss."""

    def __init__(self, model: GNN, op, vertex_ids: np.ndarray, row_blocks: int = 1):
        super().__init__()
        problem = None
        if not isinstance(op, Plexus3D) or op.m != op.n:
            problem = f"needs --algorithm plexus3d on a square A, got {op.name}"
        elif model.kind != "gcn" or model.norms is not None or \
                model.label_embedding is not None:
            problem = "trains GCN without --layernorm or --label-propagation only"
        elif isinstance(row_blocks, bool) or not isinstance(row_blocks, int) or row_blocks < 1:
            problem = f"row_blocks must be an integer >= 1, got {row_blocks!r}"
        else:
            problem = _row_blocks_problem(op, row_blocks)
        if problem:
            raise collective_error(f"the Plexus layout {problem}")
        self.convs = model.convs
        self.norms, self.label_embedding = None, None
        self.kind, self.dims, self.seed = model.kind, model.dims, model.seed
        self.dropout, self.input_dropout = model.dropout, model.input_dropout
        self.plan = PlexusPlan(op, vertex_ids, row_blocks)
        self._input: tuple | None = None

    def _blocks_of(self, x: torch.Tensor) -> torch.Tensor:
        """The input features in V (converted once; they are constant)."""
        key = (id(x), x._version, x.dtype)
        if self._input is None or self._input[0] != key:
            be = self.plan.op.grid.backend
            self._input = (key, be.as_torch(self.plan.op.rows.to_blocks(
                be.of_tensor(x.contiguous()))))
        return self._input[1]

    def _dropout(self, h: torch.Tensor, f: int, p: float, step: int, layer: int):
        """``h`` (feature block ``F_y`` of f) times the rows' vertex-keyed mask there."""
        a, b = self.plan.feature_block(f)
        be = self.plan.op.grid.backend
        mask = be.dropout_mask(self.plan.vertex_ids, f, p, self.seed, step, layer)[:, a:b]
        return h * mask.contiguous().to(h.dtype)

    def forward(self, x: torch.Tensor, op, step: int = 0, vertex_ids=None, label_input=None,
                layer_ops=None) -> torch.Tensor:
        """Logits of this rank's rows (row layout), computed in V; the arguments as
        ``GNN.forward``'s (``vertex_ids`` and ``op`` are the plan's)."""
        plan = self.plan
        h = self._blocks_of(x)
        if self.training and self.input_dropout > 0:
            h = self._dropout(h, self.dims[0], self.input_dropout, step, 0)
        last = len(self.convs) - 1
        grad_on = torch.is_grad_enabled()
        for i, conv in enumerate(self.convs):
            tile = plan.tiles[i % 2]
            w = conv.weight
            if aggregate_first(w.shape[0], w.shape[1], grad_on and h.requires_grad, grad_on):
                z = _Gemm.apply(_Aggregate.apply(h, tile), w, plan)
            else:
                z = _Aggregate.apply(_Gemm.apply(h, w, plan), tile)
            if conv.bias is not None:
                a, b = plan.feature_block(w.shape[1])
                z = z + conv.bias[a:b]
            if i < last:
                z = torch.relu(z)
                if self.training and self.dropout > 0:
                    z = self._dropout(z, self.dims[i + 1], self.dropout, step, i + 1)
            h = z
        return _ToRows.apply(h, plan, self.dims[-1])
