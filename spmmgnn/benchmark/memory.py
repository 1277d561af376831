"""Bytes one rank holds while training a GCN, predicted from the partition alone (no MPI).

What each term counts follows the code that allocates it:

* ``matrix``: the rank's ``LocalCSR`` blocks (``local_matrix``): row pointers (int64), column
  indices (int32 below 2^31 columns), the values in the training dtype (the float64 ones of
  the symmetry probe are freed before training, ``DistSpMM.keep_values``);
  on a non-symmetric A also the transposed CSRs ``matmul_t`` builds (the ``transpose``
  kernel; ``scan`` keeps none). A symmetric A runs its backward as ``A y`` and keeps none.
  ``sparse2d``/``sparse3d`` also hold SUMMA's tiles (and its buffers at those widths) when
  a width of the run takes SUMMA (``algorithms/grid_route.py``; not yet checked against a
  measured peak);
* ``halo``: the index lists of the row exchange (ghost ids, the rows to send);
* ``buffers``: the exchange's pooled work arrays, one set per width the SpMM runs at (the
  cached input aggregation in chunks of ``aggregation_chunk`` columns, or all f with a
  codec; each trained layer at its own width): ghost rows and packed send rows, the partial
  sums received by ``matmul_t``, the stage block of the oblivious algorithms, the column
  blocks of ``featureparallel``;
* ``codec``: a codec's encoded rows (sent and received, both directions) in place of the
  packed rows;
* ``features``: the rank's rows of X, labels, vertex ids and split masks;
* ``activations``: what autograd keeps from the forward: the cached ``Â X``, each hidden
  layer's ReLU-dropout output, the aggregated input of an aggregate-first layer, the logits;
* ``gradients``: the gradients alive at once in the backward of the widest layer;
* ``parameters``: the replicated weights and the flat gradient buffer; ``optimizer``: Adam's
  two moments.

Not counted: the interpreter and its libraries (about 0.3 GiB, measured in
``bench/results/scale.md``), the transient of loading the block row, and the column-block
copies a ``blocked`` kernel keeps when ``auto`` measures it fastest (one more copy of the
indices and values of that block). ``tests/benchmark/test_memory.py`` checks the total against the
measured peak of a training run at P = 2 and 4; ``bench/scale.py`` also at P = 8 (0.96-1.08
in ``bench/results/scale.md``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..algorithms import ALGORITHMS
from ..local.codecs import CastCodec, get_codec
from ..nn.memory import DENSE, BlockPlace, ModelShape, block_bytes, dense_bytes
from ..runtime.errors import SpmmgnnError
from ..stages import stage_ranges
from .kept_volumes import KEPT
from .volumes import CODEC_ALGORITHMS, Layout, predict, takes_summa

COMPONENTS = ("matrix", "halo", "buffers", "codec", *DENSE)


def _csr(rows: np.ndarray, nnz: np.ndarray, index_bytes: int, itemsize: int) -> np.ndarray:
    """A ``LocalCSR`` with its values in the training dtype (the trainer frees the float64
    values its symmetry probe used: ``DistSpMM.keep_values``)."""
    return 8 * (rows + 1) + nnz * (index_bytes + itemsize)


def _index_bytes(n: int) -> int:
    return 4 if n < 2**31 - 1 else 8


def _rows_of(layout: Layout, P: int, c: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per rank: block row i, the sizes of its rows, and its stages' block-column mask."""
    k = P // c
    r = np.arange(P)
    i, j = r // c, r % c
    bounds = stage_ranges(k, c)
    q = np.arange(k)
    stages = (q[None, :] >= bounds[j][:, None]) & (q[None, :] < bounds[j + 1][:, None])
    return i, layout.sizes[i].astype(np.int64), stages


@dataclass
class Held:
    """What an operator stores per rank, and the rows of each of its pooled buffers.

    A buffer's ``kind`` says what it holds at width w (or at the rank's share of w columns
    split over pc, for SUMMA's feature blocks): ``dense`` w values per row always;
    ``wire_out`` the packed rows sent (encoded by a codec); ``wire_in`` the encoded rows
    received (none without a codec: rows land in the ghost buffer); ``back_in`` /
    ``back_out`` the reduce of ``matmul_t`` (partial sums received; a codec's encoded
    partial sums sent) and ``back_dense`` w values per row in ``matmul_t``, only on a
    non-symmetric A."""

    matrix: np.ndarray
    halo: np.ndarray
    buffers: list[tuple]           # (rows, kind) or (rows, kind, (pc, j)): w / pc columns
    fixed: np.ndarray | int = 0    # pooled bytes that do not depend on the width


def _operator(algorithm: str, layout: Layout, P: int, c: int, itemsize: int,
              symmetric: bool, shape=None) -> Held:
    if algorithm not in HELD:
        raise SpmmgnnError(f"no memory model for {algorithm!r}")
    return HELD[algorithm](algorithm, layout, P, c, itemsize, symmetric, shape)


def _sparse_held(algorithm: str, layout: Layout, P: int, c: int, itemsize: int,
                 symmetric: bool, shape=None) -> Held:
    """sparse1d, sparse15d, prepost1d: the diagonal and ghost blocks and one halo plan."""
    n = int(layout.offsets[-1])
    ib = _index_bytes(n)
    i, rows, stages = _rows_of(layout, P, c)
    N = layout.block_nnz()
    nnz = (N[i] * stages).sum(axis=1)
    v = predict(algorithm, layout, P, c, 1, 1)
    ghost, send = v.received.astype(np.int64), v.sent.astype(np.int64)
    own = np.where(stages[np.arange(P), i], N[i, i], 0)
    if algorithm == "prepost1d":
        # diag, M_recv (rows x received: the cut non-zeros it multiplies plus one per
        # pre-aggregated row) and M_send (sent x rows: about one per row it sends)
        blocks = [(rows, own), (rows, nnz - own + ghost), (send, send)]
        t_rows = [rows, ghost, rows]
    else:
        blocks = [(rows, own), (rows, nnz - own)]  # diag, ghost
        t_rows = [rows, ghost]
    matrix = sum(_csr(r, z, ib, itemsize) for r, z in blocks)
    if not symmetric:  # the transposed CSRs matmul_t builds
        matrix = matrix + sum(_csr(r, z, ib, itemsize)
                              for r, (_, z) in zip(t_rows, blocks, strict=True))
    bufs = [(ghost, "dense"), (send, "wire_out"), (ghost, "wire_in"), (send, "back_in"),
            (ghost, "back_out")]
    if algorithm == "prepost1d":  # M_send X; matmul_t's partial sums and what returns
        bufs += [(send, "dense"), (ghost, "back_dense"), (send, "back_dense")]
    return Held(matrix, 8 * (ghost + send), bufs)


def _oblivious_held(algorithm: str, layout: Layout, P: int, c: int, itemsize: int,
                    symmetric: bool, shape=None) -> Held:
    """oblivious1d, oblivious15d: one CSR per block column of the stages, one stage block."""
    ib = _index_bytes(int(layout.offsets[-1]))
    i, rows, stages = _rows_of(layout, P, c)
    N = layout.block_nnz()
    sizes = layout.sizes.astype(np.int64)
    # one CSR per block column of the rank's stages (and its transpose, sizes[q] rows)
    matrix = (_csr(rows[:, None], N[i], ib, itemsize) * stages).sum(axis=1)
    if not symmetric:
        matrix = matrix + (_csr(sizes[None, :], N[i], ib, itemsize) * stages).sum(axis=1)
    # the stage block's rows that are written: a block received (not the rank's own),
    # or any block's partial sums in matmul_t (untouched pages are not resident)
    touched = stages if not symmetric else stages & (np.arange(P // c)[None, :] != i[:, None])
    stage = (sizes[None, :] * touched).max(axis=1, initial=0)
    return Held(matrix, np.zeros(P, dtype=np.int64), [(stage, "dense")])


def _featureparallel_held(algorithm: str, layout: Layout, P: int, c: int, itemsize: int,
                          symmetric: bool, shape=None) -> Held:
    """featureparallel: all of A; xc and zc hold all n rows of this rank's f / P columns."""
    n = int(layout.offsets[-1])
    ib = _index_bytes(n)
    _, rows, _ = _rows_of(layout, P, c)
    one = int(_csr(np.array(n), np.array(int(layout.A.nnz)), ib, itemsize))
    return Held(np.full(P, one * (1 if symmetric else 2)), np.zeros(P, dtype=np.int64),
                [(np.full(P, 2 * n // P), "dense"), (rows, "dense"), (rows, "dense")])


def _grid_sparse_held(algorithm: str, layout: Layout, P: int, c: int, itemsize: int,
                      symmetric: bool, shape=None) -> Held:
    """sparse2d, sparse3d: the tile in four blocks (own / ghost rows x own / ghost columns)
    and the expand, fold (and fiber) plans, each a halo plan with its buffers. The fold's
    reduce runs in the forward, its bcast in the backward (the expand's the other way)."""
    from .volumes import GRID_ALGORITHMS, _expand_fold_rows, grid_shape

    shape3 = grid_shape(P, shape, GRID_ALGORITHMS[algorithm])
    ib = _index_bytes(int(layout.offsets[-1]))
    steps, nnz = _expand_fold_rows(layout, shape3)
    (s_c, g_c, _, _), (g_r, s_r, _, _) = steps[0], steps[1]
    fiber = layout.sizes.reshape(-1, shape3[2]).sum(axis=1).repeat(shape3[2])  # own rows
    n_c = layout.sizes.astype(np.int64)
    pointers = 8 * (2 * (fiber + 1) + 2 * (g_r + 1))
    matrix = pointers + nnz * (ib + itemsize)   # values in the training dtype only
    if not symmetric:
        matrix = matrix + 8 * (2 * (n_c + 1) + 2 * (g_c + 1)) + nnz * (ib + itemsize)
    bufs = [(g_c, "dense"), (s_c, "wire_out"), (g_c, "wire_in"),              # expand
            (g_c, "back_dense"), (s_c, "back_in"), (g_c, "back_out"),
            (g_r, "dense"), (s_r, "wire_out"), (g_r, "wire_in"),              # fold
            (g_r, "back_dense"), (s_r, "back_in"), (g_r, "back_out")]
    halo = 8 * (g_c + s_c + g_r + s_r)
    if len(steps) > 2:                                                        # fiber
        g_f, s_f = steps[2][0], steps[2][1]
        bufs += [(fiber, "dense"), (g_f, "dense"), (s_f, "wire_out"), (g_f, "wire_in"),
                 (g_f, "back_dense"), (s_f, "back_in"), (g_f, "back_out")]
        halo = halo + 8 * (g_f + s_f)
    return Held(matrix, halo, bufs)


def _summa_held(algorithm: str, layout: Layout, P: int, c: int, itemsize: int,
                symmetric: bool, shape=None) -> Held:
    """oblivious2d, oblivious3d (``summa.py``): the tiles it holds (CSR pointers, int32
    indices, float64 values, and the packed COO it broadcasts); the largest tile it
    receives; per width, its feature block's dense block, partial result and stage block
    (3D: the layer's share, and the backward's gathered rows), and the received rows."""
    from .volumes import GRID_ALGORITHMS, grid_shape

    pr, pc, pl = grid_shape(P, shape, GRID_ALGORITHMS[algorithm])
    r = np.arange(P)
    i, j, l = (r // pl) // pc, (r // pl) % pc, r % pl
    U = layout.sizes.astype(np.int64).reshape(pr, pc, pl).sum(axis=1)    # U[i, l]
    V = U.sum(axis=1)[i]
    tiles = np.zeros((pr, pr, pl), dtype=np.int64)
    np.add.at(tiles, (i[:, None], i[None, :], l[None, :]), layout.block_nnz())
    held = (np.arange(pr)[None, :] % pc) == j[:, None]                     # [rank, k]
    mine = tiles[i, :, l]                                                   # [rank, k]
    matrix = (held * (8 * (V[:, None] + 1) + mine * (4 + 8 + 8 + itemsize))).sum(axis=1)
    # the received-tile buffer grows to the largest tile of the stages it does not hold, as
    # large as the float64 symmetry probe made it (8-byte index pair + 8-byte value)
    largest = np.where(held.all(axis=1), 0, mine.max(axis=1))
    received = largest * 16
    block, inner, cols = U[i, l], U[:, l].max(axis=0), (pc, j)
    bufs = [(block, "dense", cols), (V, "dense", cols), (inner, "dense", cols),
            (layout.sizes.astype(np.int64), "dense"), (layout.sizes.astype(np.int64), "dense"),
            (block, "back_dense", cols)]   # my rows twice: packed to send, received
    if pl > 1:
        bufs += [(block, "dense", cols), (V, "back_dense", cols)]
    return Held(matrix, np.zeros(P, dtype=np.int64), bufs, fixed=received)


def _plexus_held(algorithm: str, layout: Layout, P: int, c: int, itemsize: int,
                 symmetric: bool, shape=None) -> Held:
    """plexus3d: its tile A[R_z, C_x] (int64 pointers, int32 indices, float64 values), its
    conversion plans (three int64 per own row and per row of its blocks) and, per width,
    its feature block's blocks: X[C_xz], the gathered X[C_x], the partial A[R_z, .] X and
    the kept (A X)[R_zx], and the rows sent and received by the conversions. Estimated,
    not checked against a measured peak."""
    from ..algorithms.plexus3d import plexus_blocks
    from .volumes import _coords, grid_shape, plexus_tile_nnz

    X, Y, Z = grid_shape(P, shape, 3)
    n = int(layout.offsets[-1])
    x, y, z = _coords((X, Y, Z), np.arange(P))
    rb, cb, _ = plexus_blocks((X, Y, Z), n, n)
    own_r, own_c = np.diff(rb)[z * X + x], np.diff(cb)[x * Z + z]
    r_z, c_x = np.diff(rb).reshape(Z, X).sum(axis=1)[z], np.diff(cb).reshape(X, Z).sum(axis=1)[x]
    matrix = 8 * (r_z + 1) + plexus_tile_nnz(layout, (X, Y, Z)) * (4 + 8)
    sizes = layout.sizes.astype(np.int64)
    split = (Y, y)
    bufs = [(own_c, "dense", split), (c_x, "dense", split), (r_z, "dense", split),
            (own_r, "dense", split), (sizes, "dense"), (sizes, "dense")]
    return Held(matrix, 8 * (2 * sizes + own_c) + 8 * (2 * sizes + own_r), bufs)


HELD = {"sparse1d": _sparse_held, "sparse15d": _sparse_held, "prepost1d": _sparse_held,
        "oblivious1d": _oblivious_held, "oblivious15d": _oblivious_held,
        "featureparallel": _featureparallel_held, "sparse2d": _grid_sparse_held,
        "sparse3d": _grid_sparse_held, "oblivious2d": _summa_held,
        "oblivious3d": _summa_held, "plexus3d": _plexus_held}


def _buffer_bytes(held: Held, w: int, itemsize: int, backward: bool, fwd,
                  bwd) -> tuple[np.ndarray, np.ndarray]:
    """(rows of w values, a codec's encoded rows) of the operator's pooled buffers at
    width w."""
    dense, coded = 0, 0
    for rows, kind, *split in held.buffers:
        codec = bwd if kind.startswith("back") else fwd
        cols = w
        if split:
            pc, j = split[0]
            cols = w // pc + (j < w % pc)
        values = rows * cols * itemsize
        if kind == "dense" or (kind == "back_dense" and backward):
            dense = dense + values
        elif kind == "wire_out" or (kind == "back_in" and backward):
            if codec is None:
                dense = dense + values
            else:
                coded = coded + rows * int(codec.row_bytes(w))
        elif codec is not None and (kind == "wire_in" or (kind == "back_out" and backward)):
            coded = coded + rows * int(codec.row_bytes(w))
    return dense, coded


def _wire(codec, itemsize: int):
    """The codec whose encoded rows take buffers, or None when rows travel as they are
    (no codec, or a cast to the training dtype itself)."""
    dtype = np.dtype(np.float32 if itemsize == 4 else np.float64)
    return None if isinstance(codec, CastCodec) and codec.wire == dtype else codec


def _summa_fallback(algorithm: str, layout: Layout, P: int, itemsize: int, symmetric: bool,
                    grid, widths: dict[int, bool], codec, codec_backward):
    """(SUMMA's ``Held``, its buffers) when ``sparse2d``/``sparse3d`` run SUMMA at one of
    the widths or in the symmetry probe (``algorithms/grid_route.py``: built on first use,
    then kept), else None."""
    bound = getattr(ALGORITHMS.get(algorithm), "bounded_by", None)
    if bound is None:
        return None
    calls = [(2, 8, True, codec, codec_backward)] + [(w, itemsize, b, codec, codec_backward)
                                            for w, b in widths.items()]
    routed = [(w, isz, b) for w, isz, b, cd, cb in calls
              if any(takes_summa(algorithm, layout, P, w, isz, cd, cb, grid))]
    if not routed:
        return None
    held = _summa_held(bound, layout, P, 1, itemsize, symmetric, grid)
    buffers = held.fixed
    for w, isz, backward in routed:
        buffers = buffers + _buffer_bytes(held, w, isz, backward, None, None)[0]
    return held, buffers


def predict_memory(algorithm: str, layout: Layout, P: int, c: int, shape: ModelShape,
                   symmetric: bool = True, codec: str | None = None,
                   codec_backward: str | None = "same",
                   grid: tuple[int, ...] | None = None) -> dict[str, np.ndarray]:
    """Per-rank bytes of each component (``COMPONENTS``) and their ``total``; ``grid``: the
    shape of a 2D/3D algorithm's grid (None: the factors of P closest to a square / cube)."""
    if P % c or layout.k != P // c:
        raise SpmmgnnError(f"the partition has {layout.k} blocks; P/c = {P // c} expected")
    s = shape.itemsize
    symmetric = symmetric and codec in (None, "none")  # a codec keeps A^T y's own exchange
    held = _operator(algorithm, layout, P, c, s, symmetric, grid)
    fwd = _wire(get_codec(codec), s)
    bwd = fwd if codec_backward == "same" else _wire(get_codec(codec_backward), s)
    widths: dict[int, bool] = {}  # the pool keys buffers by width: one set per width
    for w, backward in shape.spmm_widths(codec=codec not in (None, "none")):
        widths[w] = widths.get(w, False) or (backward and not symmetric)
    # the symmetry probe's float64 A x and A^T x of 2 columns keep their own buffers
    buffers, _ = _buffer_bytes(held, 2, 8, True, None, None)
    buffers, codec_bytes = buffers + held.fixed, 0
    for w, backward in widths.items():
        dense, coded = _buffer_bytes(held, w, s, backward, fwd, bwd)
        buffers, codec_bytes = buffers + dense, codec_bytes + coded
    summa = _summa_fallback(algorithm, layout, P, s, symmetric, grid, widths, codec,
                            codec_backward)
    if summa is not None:   # sparse2d/3d take SUMMA at some width: its tiles and buffers
        held = Held(held.matrix + summa[0].matrix, held.halo, held.buffers, held.fixed)
        buffers = buffers + summa[1]
    _, rows, _ = _rows_of(layout, P, c)
    out = dict(matrix=held.matrix, halo=held.halo, buffers=buffers, codec=codec_bytes,
               **dense_bytes(shape, rows))
    out = {k: np.broadcast_to(np.asarray(v, dtype=np.int64), (P,)).copy()
           for k, v in out.items()}
    out["total"] = sum(out[k] for k in COMPONENTS)
    return out


def kept_places(algorithm: str, layout: Layout, P: int, grid=None) -> list[BlockPlace]:
    """Per rank, where ``train --grid-layout`` (oblivious2d/3d) or ``--plexus-blocks``
    (plexus3d) keeps its activations: SUMMA's U_il rows and feature block j of pc; Plexus's
    block of V (row block z X + x), its tile lines and its tiles' non-zeros, counted here
    from the layout (A's non-zeros by the V blocks of their row and column)."""
    from ..algorithms.plexus3d import plexus_blocks, plexus_orders
    from .volumes import GRID_ALGORITHMS, _coords, block_pairs, grid_shape

    rows = layout.sizes.astype(np.int64)
    if algorithm != "plexus3d":
        pr, pc, pl = grid_shape(P, grid, GRID_ALGORITHMS[algorithm])
        i, j, l = _coords((pr, pc, pl), np.arange(P))
        U = rows.reshape(pr, pc, pl).sum(axis=1)[i, l]
        return [BlockPlace("grid", int(rows[r]), int(U[r]), pc, int(j[r])) for r in range(P)]
    X, Y, Z = grid_shape(P, grid, 3)
    n = int(layout.offsets[-1])
    bounds = plexus_blocks((X, Y, Z), n, n)[0]
    nb = X * Z
    block = np.searchsorted(bounds, plexus_orders(n, n)[0], "right") - 1
    B = block_pairs(layout.A.indptr, layout.A.indices, block, block, nb, nb)   # by V blocks
    sizes = np.diff(bounds)
    x, y, z = _coords((X, Y, Z), np.arange(P))
    out = []
    for r in range(P):
        along_x, along_z = z[r] * X + np.arange(X), np.arange(Z) * X + x[r]
        lines = (int(sizes[along_x].sum()), int(sizes[along_z].sum()))
        tiles = (int(B[np.ix_(along_x, along_z)].sum()), int(B[np.ix_(along_z, along_x)].sum()))
        out.append(BlockPlace("plexus", int(rows[r]), int(sizes[z[r] * X + x[r]]), Y, int(y[r]),
                              lines, tiles, lines))
    return out


def kept_memory(algorithm: str, layout: Layout, P: int, shape: ModelShape,
                symmetric: bool = True, grid=None) -> dict[str, np.ndarray]:
    """``predict_memory`` in the kept layout: the operator's part as the row layout's (its
    tiles and pooled buffers), Plexus's two tiles of V added to ``matrix``, and the dense
    part of ``nn.memory.block_bytes`` (what the trainer's preflight checks) in place of the
    row layout's."""
    out = predict_memory(algorithm, layout, P, 1, shape, symmetric, grid=grid)
    for r, place in enumerate(kept_places(algorithm, layout, P, grid)):
        got = block_bytes(shape, place)
        out["matrix"][r] += got.pop("tiles")
        for k, v in got.items():
            out[k][r] = v
    out["total"] = sum(out[k] for k in COMPONENTS)
    return out


def memory_rows(A, Ps: list[int], cs: list[int], algorithms: list[str], shape: ModelShape,
                partitioner: str = "none", codec: str | None = None,
                layouts: dict[int, Layout] | None = None,
                grids: list | None = None, parts_per_node: int | None = None,
                symmetric: bool | None = None) -> list[dict]:
    """The largest rank's bytes per component for every runnable (P, c, algorithm) of the
    normalized ``A`` (square; its symmetry decides whether transposes are kept, checked
    here unless ``symmetric`` says; ``parts_per_node``: the block rows of one node, for a
    ``twolevel:`` partitioner). oblivious2d/3d and plexus3d also in their kept layouts
    (``<name> kept``: ``kept_memory``)."""
    from ..grid import format_shape
    from .costs import cached_layout
    from .volumes import grid_points

    layouts = {} if layouts is None else layouts
    if symmetric is None:
        symmetric = (A != A.T).nnz == 0
    rows = []
    for P in Ps:
        for algo in algorithms:
            for c, grid in grid_points(algo, P, cs, grids):
                layout = cached_layout(layouts, A, P // c, partitioner, 0,
                                       parts_per_node=parts_per_node)
                m = predict_memory(algo, layout, P, c, shape, symmetric,
                                   codec if algo in CODEC_ALGORITHMS else None, grid=grid)
                r = int(np.argmax(m["total"]))
                rows.append(dict(P=P, c=c, grid=grid and format_shape(grid), algorithm=algo,
                                 rank=r, symmetric=bool(symmetric),
                                 **{k: int(v[r]) for k, v in m.items()},
                                 min_total=int(m["total"].min())))
                if algo in KEPT and codec in (None, "none"):   # and in its kept layout
                    m = kept_memory(algo, layout, P, shape, symmetric, grid)
                    r = int(np.argmax(m["total"]))
                    rows.append(dict(P=P, c=c, grid=grid and format_shape(grid),
                                     algorithm=f"{algo} kept", rank=r,
                                     symmetric=bool(symmetric),
                                     **{k: int(v[r]) for k, v in m.items()},
                                     min_total=int(m["total"].min())))
    return sorted(rows, key=lambda r: (r["P"], r["c"]))


def format_memory(rows: list[dict], header: bool = True) -> str:
    """The table ``spmmgnn model --memory`` prints (MiB, the largest rank); ``header=False``
    prints the rows alone (a later P of the same table)."""
    width = {k: max(len(k), 7) for k in COMPONENTS}
    head = (f"{'P':>5} {'grid':>7} {'algorithm':>15} " + " ".join(f"{k:>{width[k]}}" for k in
                                                                  COMPONENTS)
            + f" {'total':>9} {'smallest':>9}")
    lines = [head] if header else []
    for r in rows:
        lines.append(f"{r['P']:>5} {r.get('grid') or 'c=' + str(r['c']):>7} "
                     f"{r['algorithm']:>15} "
                     + " ".join(f"{r[k] / 2**20:>{width[k]}.1f}" for k in COMPONENTS)
                     + f" {r['total'] / 2**20:>9.1f} {r['min_total'] / 2**20:>9.1f}")
    return "\n".join(lines)
