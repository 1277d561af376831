"""GCN training with the activations kept in SUMMA's 2D (3D) block layout, as CAGNET trains
(``gcn_distr_2d.py``: ``GCNFunc``; ``gcn_distr_3d.py`` the same per layer of the grid).

Rank (i, j, l) holds every activation as the block H[U_il, F_j]: the rows of its process row
in its layer (``SummaTiles.in_rows``), the j-th of pc feature blocks (``stage_ranges``). With
``oblivious2d``/``oblivious3d`` the SpMM then runs its SUMMA stages alone
(``Summa.matmul_blocks``), never converting. Per layer:

* ``A H``: the SUMMA stages (tiles of A at 8 + itemsize bytes per non-zero along the process
  row, H blocks along the process column; 3D: the fiber's reduce-scatter), backward ``A^T G``
  (or ``A G`` when ``op.symmetric``);
* ``H W`` (CAGNET's ``summa_loc``): the blocks of my process row are all-gathered, so I hold
  H[U_il, :], and multiply by W[:, G_j] (W is replicated); backward the output gradient's
  blocks are all-gathered the same way, dH[U_il, F_j] = dZ[U_il, :] W[F_j, :]^T, and the
  weight gradient dW[:, G_j] = H[U_il, :]^T dZ[U_il, G_j] is a partial sum the trainer's
  gradient all-reduce completes (zero outside G_j);
* bias, ReLU and dropout on the block, the dropout mask keyed by (global vertex id, global
  feature index), so the masks are the row layout's.

The layer picks ``(A H) W`` or ``A (H W)`` as ``layers.aggregate_first`` does. The cached
first-layer aggregation ``A X`` is computed once and kept all-gathered (H[U_il, :]: constant),
so the first layer's product is local. Only two conversions remain, counted as
``bytes_sent_by_phase["convert"]``: the input features, row layout to blocks, once at set-up;
and the logits, blocks to rows where the labels are (their gradient back to blocks) each
epoch. The H W all-gathers count as the algorithm's bytes (CAGNET moves them too).

Supported: GCN, any depth, dropout between layers, the first-layer cache or not. Refused
(one collective error): GraphSAGE, LayerNorm, input dropout, label propagation, delayed
aggregates, and algorithms other than ``oblivious2d``/``oblivious3d``.
"""

from __future__ import annotations

import numpy as np
import torch
from mpi4py import MPI

from ..algorithms.base import DistSpMM
from ..algorithms.summa import Summa
from ..exchange.halo import displacements
from ..runtime.errors import agree
from ..stages import stage_ranges
from .layers import GCNConv, aggregate_first
from .memory import BlockPlace
from .models import GNN

GRID_ALGORITHMS = ("oblivious2d", "oblivious3d")


class GridLayout:
    """One rank's block layout on an ``oblivious2d``/``oblivious3d`` operator, and the moves
    between blocks: the SpMM, the row all-gather of the dense product, the conversions."""

    def __init__(self, op: DistSpMM, vertex_ids: np.ndarray):
        """Collective. ``vertex_ids``: the global id of each of my rows (row layout)."""
        self.op, self.be = op, op.grid.backend
        self.summa: Summa = op.product
        self.t, self.stats = self.summa.t, op.stats
        self.comm = self.summa.across_row        # (i, ., l): the ranks sharing my rows U_il
        self.link = op.grid.link(self.comm)
        self.pc = self.summa.pc
        self.far = self.summa.far["row"]
        sizes = np.diff(self.t.out_rows.offsets).astype(np.int64)
        ids = np.empty(int(sizes.sum()), dtype=np.int64)
        mine = np.ascontiguousarray(vertex_ids, dtype=np.int64)
        self.comm.Allgatherv(mine, [ids, (sizes, displacements(sizes)), MPI.INT64_T])
        self.ids = self.be.vertex_ids(ids)       # global vertex id of each block row

    def bounds(self, f: int) -> np.ndarray:
        return stage_ranges(f, self.pc)

    def span(self, f: int) -> tuple[int, int]:
        """My feature block F_j of f features."""
        b = self.bounds(f)
        return int(b[self.t.j]), int(b[self.t.j + 1])

    # ------------------------------------------------------------ conversions (phase "convert")
    def _copy(self, x):
        """A backend array of its own holding ``x`` (SUMMA hands out pooled buffers)."""
        out = self.be.empty(tuple(x.shape), self.be.dtype(x))
        out[...] = x
        return out

    def to_blocks(self, rows):
        b = self.summa.to_blocks(self.be.contiguous(rows), self.t.in_rows,
                                 self.bounds(rows.shape[1]))
        return self._copy(b)

    def to_rows(self, block, f: int):
        be = self.be
        out = be.empty((self.op.n_local, f), be.dtype(block))
        self.summa.to_rows(be.contiguous(block), self.t.out_rows, self.bounds(f), out)
        return out

    # ------------------------------------------------------------ the algorithm's moves
    def spmm(self, h, transposed: bool = False):
        """(A H) or (A^T H) on blocks: SUMMA's stages, no conversion."""
        h = self.be.contiguous(h)
        if transposed:
            self.stats.calls_matmul_t += 1
            return self._copy(self.summa.matmul_t_blocks(h))
        self.stats.calls_matmul += 1
        return self._copy(self.summa.matmul_blocks(h))

    def gather(self, block, f: int):
        """H[U_il, :] from the blocks H[U_il, F_j'] of my process row (an all-gather through
        the grid's link; CAGNET's ``summa_loc`` broadcasts them stage by stage): I send my
        block to the pc - 1 others."""
        be = self.be
        n, widths, dtype = block.shape[0], np.diff(self.bounds(f)), be.dtype(block)
        counts = n * widths.astype(np.int64)
        flat = be.empty((int(counts.sum()),), dtype)
        with self.stats.timing("seconds_exchange"):
            self.link.allgatherv(be.contiguous(block).reshape(-1), flat, counts, self.stats,
                                 "gather")
        isz, me = dtype.itemsize, self.comm.Get_rank()
        sent = int(counts[me]) * isz * (self.pc - 1)
        received = (int(counts.sum()) - int(counts[me])) * isz
        self.stats.count_exchange(sent, received, 0, int(counts[me]) * isz * int(self.far.sum()),
                                  int(counts[self.far].sum()) * isz)
        out = be.empty((n, f), dtype)
        start, b = 0, self.bounds(f)
        for q in range(self.pc):
            w = int(widths[q])
            out[:, b[q]:b[q + 1]] = flat[start:start + n * w].reshape(n, w)
            start += n * w
        return out


def block_place(op: DistSpMM) -> BlockPlace:
    """Where this rank keeps its activations in SUMMA's blocks (``nn.memory.BlockPlace``:
    the memory preflight): the rows U_il of its process row in its layer, feature block j
    of pc."""
    summa: Summa = op.product
    block = int(np.diff(summa.t.out_rows.offsets).sum())
    return BlockPlace("grid", op.n_local, block, summa.pc, summa.t.j)


class BlockSpMM(torch.autograd.Function):
    """A H on blocks; backward A^T G (A G when the operator is symmetric)."""

    @staticmethod
    def forward(ctx, h: torch.Tensor, layout: GridLayout) -> torch.Tensor:
        ctx.layout = layout
        be = layout.be
        return be.as_torch(layout.spmm(be.of_tensor(h)))

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        if not ctx.needs_input_grad[0]:
            return None, None
        layout = ctx.layout
        be = layout.be
        g = be.of_tensor(grad.contiguous())
        return be.as_torch(layout.spmm(g, transposed=not layout.op.symmetric)), None


class BlockLinear(torch.autograd.Function):
    """Z[U_il, G_j] = H[U_il, :] W[:, G_j] from the block H[U_il, F_j] (CAGNET's
    ``summa_loc``); ``full``: H[U_il, :] already gathered (a constant input)."""

    @staticmethod
    def forward(ctx, h: torch.Tensor, weight: torch.Tensor, layout: GridLayout,
                full: torch.Tensor | None = None) -> torch.Tensor:
        be = layout.be
        f_in, f_out = weight.shape
        h_full = (be.of_tensor(full) if full is not None
                  else layout.gather(be.of_tensor(h), f_in))
        a, b = layout.span(f_out)
        ctx.layout, ctx.span = layout, (a, b)
        ctx.save_for_backward(be.as_torch(h_full), weight)
        return be.as_torch(h_full @ be.of_tensor(weight)[:, a:b])

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        h_full, weight = ctx.saved_tensors
        layout, (a, b) = ctx.layout, ctx.span
        be = layout.be
        g = be.of_tensor(grad.contiguous())
        f_in, f_out = weight.shape
        grad_h = grad_w = None
        if ctx.needs_input_grad[0]:
            c, d = layout.span(f_in)
            g_full = layout.gather(g, f_out)
            grad_h = be.as_torch(g_full @ be.of_tensor(weight)[c:d].T)
        if ctx.needs_input_grad[1]:
            grad_w = torch.zeros_like(weight)
            grad_w[:, a:b] = be.as_torch(be.of_tensor(h_full).T @ g)
        return grad_h, grad_w, None, None


class BlocksToRows(torch.autograd.Function):
    """The logits from blocks to my rows (a conversion); backward the reverse."""

    @staticmethod
    def forward(ctx, block: torch.Tensor, layout: GridLayout, f: int) -> torch.Tensor:
        ctx.layout = layout
        be = layout.be
        return be.as_torch(layout.to_rows(be.of_tensor(block), f))

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        be = ctx.layout.be
        return be.as_torch(ctx.layout.to_blocks(be.of_tensor(grad.contiguous()))), None, None


def grid_layout_problem(model: GNN, op: DistSpMM, delayed: bool,
                        label_propagation: bool) -> str | None:
    """Why the block-layout forward cannot run this model on this operator (None: it can)."""
    why = []
    if op.name not in GRID_ALGORITHMS:
        why.append(f"--algorithm {'/'.join(GRID_ALGORITHMS)} (got {op.name})")
    if model.kind != "gcn" or model.norms is not None or model.input_dropout > 0:
        why.append("--model gcn without --layernorm or --input-dropout")
    if delayed or label_propagation:
        why.append("no delayed aggregates or label propagation")
    if why:
        return "training in the 2D/3D block layout needs " + "; ".join(why)
    return None


class GridForward:
    """The forward of a GCN ``GNN`` with its activations in the block layout: called like
    the model (``forward(x, op, step, vertex_ids)``), returns the logits of my rows."""

    def __init__(self, model: GNN, op: DistSpMM, vertex_ids: np.ndarray,
                 delayed: bool = False, label_propagation: bool = False):
        """Collective: one error on every rank when the model or operator cannot run so."""
        agree(op.grid.comm, grid_layout_problem(model, op, delayed, label_propagation))
        self.model, self.op = model, op
        self.layout = GridLayout(op, vertex_ids)
        self._x: tuple | None = None       # (key, X blocks)
        self._cache: tuple | None = None   # (key, A X all-gathered: H[U_il, :])

    def _input(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The features' blocks (converted once) and, with the cache, the constant first
        aggregation A X all-gathered (one SpMM and one gather, once)."""
        lay, be = self.layout, self.layout.be
        key = (id(x), x._version, x.dtype)
        if self._x is None or self._x[0] != key:
            self._x = (key, be.as_torch(lay.to_blocks(be.of_tensor(x))))
            self._cache = None
        xb = self._x[1]
        if not self.model.cache_input_aggregation:
            return xb, None
        if self._cache is None:
            agg = lay.spmm(be.of_tensor(xb))
            self._cache = (key, be.as_torch(lay.gather(agg, x.shape[1])))
        return xb, self._cache[1]

    def _conv(self, h: torch.Tensor, conv: GCNConv, full: torch.Tensor | None) -> torch.Tensor:
        """A h W on blocks (no bias), in the order ``aggregate_first`` picks."""
        lay, w = self.layout, conv.weight
        if full is not None:
            return BlockLinear.apply(h, w, lay, full)
        grad_on = torch.is_grad_enabled()
        if aggregate_first(w.shape[0], w.shape[1], grad_on and h.requires_grad, grad_on):
            return BlockLinear.apply(BlockSpMM.apply(h, lay), w, lay)
        return BlockSpMM.apply(BlockLinear.apply(h, w, lay), lay)

    def __call__(self, x: torch.Tensor, op: DistSpMM, step: int = 0,
                 vertex_ids: np.ndarray | None = None, label_input=None,
                 layer_ops=None) -> torch.Tensor:
        model, lay = self.model, self.layout
        h, first = self._input(x)
        last = len(model.convs) - 1
        for i, conv in enumerate(model.convs):
            z = self._conv(h, conv, first if i == 0 else None)
            a, b = lay.span(conv.weight.shape[1])
            bias = conv.bias[a:b] if conv.bias is not None else None
            if i == last:
                h = z if bias is None else z + bias
            elif model.training and model.dropout > 0:
                h = lay.be.relu_dropout(z, lay.ids, model.dropout, model.seed, step, i + 1,
                                        bias=bias, col0=a)
            else:
                h = torch.relu(z if bias is None else z + bias)
        return BlocksToRows.apply(h, lay, model.dims[-1])
