"""The byte models of the 2D and 3D families: the sparse tile route (``sparse_grid_volumes``:
expand, fold and the fiber's reduce), SUMMA (``summa_volumes``) and Plexus (``plexus_volumes``),
from the partition and the grid shape alone."""

from __future__ import annotations

import numpy as np

from ..algorithms.plexus3d import plexus_blocks, plexus_orders
from ..runtime.errors import SpmmgnnError
from ..stages import stage_ranges
from .grid_rows import grid_rows
from .volume_layout import Layout, Phase, Volumes, block_pairs, log2_ceil, row_bytes


def grid_shape(P: int, shape, ndim: int) -> tuple[int, int, int]:
    """(pr, pc, pl) of a 2D (``ndim`` 2, pl = 1) or 3D grid of P ranks; ``shape`` None takes
    the factors of P closest to a square / cube (CAGNET's sqrt(P) x sqrt(P), P^1/3 cube)."""
    from ..grid import format_shape, near_square

    shape = near_square(P, ndim) if shape is None else tuple(int(s) for s in shape)
    if len(shape) != ndim or int(np.prod(shape)) != P:
        raise SpmmgnnError(f"a {ndim}D grid of P={P} ranks, got {format_shape(shape)}")
    return (*shape, 1) if ndim == 2 else tuple(shape)


def _coords(shape3, p: np.ndarray):
    pr, pc, pl = shape3
    rest, l = np.divmod(p, pl)
    i, j = np.divmod(rest, pc)
    return i, j, l


def _expand_fold_rows(layout: Layout, shape3) -> tuple[list[tuple], np.ndarray]:
    """The row exchanges of sparse2d/sparse3d, one ``(sent, received, peers, name)`` each,
    and the non-zeros of every tile: the tile of a non-zero (u, v) is rank (i(u), j(v), l(v))
    in owner coordinates; *expand* sends X row v to the tile unless it owns v; *fold* sends
    the tile's partial row u to (i(u), j(u), l(v)) when that is another rank's fiber; the
    *fiber* step sends row u's partial of layer l(v) to u's owner when l(v) != l(u)."""
    P = layout.k
    _, pc, pl = shape3
    key = ("grid", pc, pl)
    if key not in layout.cache:   # one pass per grid shape (the time and memory models share)
        layout.cache[key] = grid_rows(layout.A.indptr, layout.A.indices, layout.parts(), pc,
                                       pl, P)
    rows, pairs, nnz, _, _ = layout.cache[key]
    out = []
    for s, name in enumerate(("expand", "fold", "fiber")[:3 if pl > 1 else 2]):
        peers = np.maximum(pairs[s].sum(axis=1, dtype=np.int64),
                           pairs[s].sum(axis=0, dtype=np.int64))
        out.append((rows[s, 0], rows[s, 1], peers, name))
    return out, nnz


def grid_metrics(A, partition, shape: tuple[int, ...]) -> dict[str, np.ndarray]:
    """The 2D/3D partition metrics (docs/metrics.md) of ``A`` (the user's order) laid out by
    ``partition`` (anything ``from_scipy`` takes, with P parts) on the grid ``shape``: per
    rank ``expand`` (rows of X received), ``fold`` (partial rows sent), ``fiber`` (3D:
    partial rows sent across layers), ``*_peers`` and the tile's ``nnz``."""
    P = int(np.prod(shape))
    layout = Layout.build(A, partition, P)
    steps, nnz = _expand_fold_rows(layout, grid_shape(P, shape, len(shape)))
    out = {"nnz": nnz}
    for sent, received, peers, name in steps:
        out[name] = received if name == "expand" else sent
        out[f"{name}_peers"] = peers
    return out


def sparse_grid_volumes(layout: Layout, P: int, c: int, f: int, itemsize: int = 4,
                        codec: str | None = None, codec_backward: str | None = "same",
                        shape=None, ndim: int = 2) -> Volumes:
    """sparse2d / sparse3d: expand, fold (and the fiber step): each a halo exchange whose
    forward rows travel with ``codec`` and whose transpose sends them back as partial sums
    (``codec_backward``)."""
    _one_part_per_rank(layout, P, c)
    shape3 = grid_shape(P, shape, ndim)
    steps, nnz = _expand_fold_rows(layout, shape3)
    rb = row_bytes(f, itemsize, codec)
    rbt = rb if codec_backward == "same" else row_bytes(f, itemsize, codec_backward)
    sent = sum(s for s, _, _, _ in steps)
    received = sum(r for _, r, _, _ in steps)
    phases = [Phase(name, peers, np.maximum(s, r) * rb) for s, r, peers, name in steps]
    return Volumes(sent=sent * rb, received=received * rb, sent_t=received * rbt,
                   received_t=sent * rbt, allreduce=np.zeros(P, dtype=np.int64), nnz=nnz,
                   messages=sum(p.latency for p in phases), phases=phases)


def summa_volumes(layout: Layout, P: int, c: int, f: int, itemsize: int = 4,
                  codec: str | None = None, codec_backward: str | None = "same",
                  shape=None, ndim: int = 2, convert: bool = True) -> Volumes:
    """oblivious2d / oblivious3d (``algorithms/summa.py``): the rows converted to and from
    2D blocks inside the process row, pr stages each broadcasting the stage's tile of A (3
    words per non-zero) along the process row and a block of H along the process column,
    and in 3D the layers' reduce-scatter (the transpose: an all-gather first and a reduce
    per stage). ``convert=False``: the stages alone, H kept in the blocks between calls
    (``train --grid-layout``, as CAGNET trains)."""
    if codec not in (None, "none"):
        raise SpmmgnnError("the oblivious algorithms broadcast whole blocks: no codec")
    _one_part_per_rank(layout, P, c)
    shape3 = grid_shape(P, shape, ndim)
    pr, pc, pl = shape3
    i, j, l = _coords(shape3, np.arange(P))
    n_r = layout.sizes.astype(np.int64)
    fj = np.diff(stage_ranges(f, pc))[j]
    U = n_r.reshape(pr, pc, pl).sum(axis=1)                 # U[i, l]: rows of parts (i, ., l)
    Usz, Vsz = U[i, l], U.sum(axis=1)[i]
    N = layout.block_nnz()                                  # N[p, q]
    pi, _, pll = _coords(shape3, np.arange(P))
    # nnz of the tile A[V_i, U_kl] = rows of process row i, columns of parts (k, ., l)
    tiles = np.zeros((pr, pr, pl), dtype=np.int64)
    np.add.at(tiles, (pi[:, None], pi[None, :], pll[None, :]), N)
    tile_bytes = tiles * (8 + itemsize)                     # [i, k, l]
    k = np.arange(pr)
    held = (k[None, :] % pc) == j[:, None]                  # [rank, k]: I hold tile k
    mine_a = tile_bytes[i, :, l]                            # [rank, k]
    a_sent = (held * mine_a).sum(axis=1) * (pc - 1)
    a_recv = (~held * mine_a).sum(axis=1)
    h_blocks = U[:, l].T * fj[:, None] * itemsize            # [rank, k]: |U_kl| |F_j|
    h_own = Usz * fj * itemsize
    h_sent, h_recv = (pr - 1) * h_own, h_blocks.sum(axis=1) - h_own
    conv_a = n_r * (f - fj) * itemsize * convert             # my rows' other features
    conv_b = (Usz - n_r) * fj * itemsize * convert           # the block's other rows
    layer_a = (Vsz - Usz) * fj * itemsize                    # reduce-scatter: others' rows
    layer_b = Usz * fj * itemsize * (pl - 1)                 # my rows from each other layer
    sent = conv_a + a_sent + h_sent + layer_a + conv_b
    received = conv_b + a_recv + h_recv + layer_b + conv_a
    sent_t = conv_a + layer_b + a_sent + h_recv + conv_b
    received_t = conv_b + layer_a + a_recv + h_sent + conv_a
    tree_r, tree_c = log2_ceil(pr), log2_ceil(pc)
    const = np.ones(P, dtype=np.int64)
    phases = [Phase("to blocks", const * (pc - 1), np.maximum(conv_a, conv_b)),
              Phase("tiles of A", const * pr * tree_c, mine_a.sum(axis=1) * (pc > 1)),
              Phase("blocks of H", const * pr * tree_r, h_blocks.sum(axis=1) * (pr > 1))]
    if pl > 1:
        phases.append(Phase("layers", const * log2_ceil(pl), layer_a))
    phases.append(Phase("to rows", const * (pc - 1), np.maximum(conv_a, conv_b)))
    if not convert:
        phases = phases[1:-1]
    return Volumes(sent=sent, received=received, sent_t=sent_t, received_t=received_t,
                   allreduce=np.zeros(P, dtype=np.int64),
                   # every stage's tile times the rank's f_j of the f columns (as
                   # featureparallel's work): nnz x f / P on an even split
                   nnz=np.rint(tiles[i, :, l].sum(axis=1) * fj / max(f, 1)).astype(np.int64),
                   messages=sum(p.latency for p in phases), phases=phases)


def plexus_volumes(layout: Layout, P: int, c: int, f: int, itemsize: int = 4,
                   codec: str | None = None, codec_backward: str | None = "same",
                   shape=None, convert: bool = True) -> Volumes:
    """plexus3d (``algorithms/plexus3d.py``): the rows converted to the permuted blocks, the
    all-gather of X[C_x, F_y] along z, the reduce-scatter of A[R_z, .] X along x, the
    conversion back (the transpose: the same with x and z swapped), at the default
    ``permute_seed`` 0. ``convert=False``: the all-gather and reduce-scatter alone in the
    layout ``V`` that ``train --plexus-blocks`` keeps from layer to layer (as Plexus runs;
    ``nn/plexus_model.py``): rank (x, y, z) holds row block z X + x of both sides, so its
    column group along z is the blocks z' X + x (its tile ``T0``; the non-zeros counted are
    plexus3d's own tile's)."""
    if codec not in (None, "none"):
        raise SpmmgnnError("plexus3d gathers and reduces whole blocks: no codec")
    _one_part_per_rank(layout, P, c)
    X, Y, Z = grid_shape(P, shape, 3)
    n = int(layout.offsets[-1])
    row_pos, col_pos = plexus_orders(n, n)
    row_bounds, col_bounds, _ = plexus_blocks((X, Y, Z), n, n)
    x, y, z = _coords((X, Y, Z), np.arange(P))
    w = np.diff(stage_ranges(f, Y))[y] * itemsize            # bytes of one row's F_y
    cnt_r = plexus_counts(layout, row_pos, row_bounds)
    cnt_c = plexus_counts(layout, col_pos, col_bounds)
    br, bc = z * X + x, x * Z + z                              # my row block, column block
    size_r, size_c = np.diff(row_bounds), np.diff(col_bounds)
    r_z, c_x = size_r.reshape(Z, X).sum(axis=1)[z], size_c.reshape(X, Z).sum(axis=1)[x]
    in_c, in_r = (plexus_conversion(layout, cnt, b, size, w, f * itemsize)
                  for cnt, b, size in ((cnt_c, bc, size_c), (cnt_r, br, size_r)))
    rank = np.arange(P)
    peers_c = (cnt_c > 0).sum(axis=1) * Y - (cnt_c[rank, bc] > 0)
    peers_r = (cnt_r > 0).sum(axis=1) * Y - (cnt_r[rank, br] > 0)
    if not convert:   # layout V: the column blocks are the row blocks z' X + x
        in_c = in_r = (np.zeros(P, dtype=np.int64),) * 2
        size_c, bc, c_x = size_r, br, size_r.reshape(Z, X).sum(axis=0)[x]
    gather_z = (size_c[bc] * w * (Z - 1), (c_x - size_c[bc]) * w)
    gather_x = (size_r[br] * w * (X - 1), (r_z - size_r[br]) * w)
    reduce_x, reduce_z = gather_x[::-1], gather_z[::-1]       # the reverse of a gather
    sent = in_c[0] + gather_z[0] + reduce_x[0] + in_r[1]
    received = in_c[1] + gather_z[1] + reduce_x[1] + in_r[0]
    sent_t = in_r[0] + gather_x[0] + reduce_z[0] + in_c[1]
    received_t = in_r[1] + gather_x[1] + reduce_z[1] + in_c[0]
    nnz = plexus_tile_nnz(layout, (X, Y, Z))
    phases = [Phase("to blocks", peers_c * convert, np.maximum(*in_c)),
              Phase("all-gather along z", np.full(P, log2_ceil(Z)), np.maximum(*gather_z)),
              Phase("reduce-scatter along x", np.full(P, log2_ceil(X)),
                    np.maximum(*reduce_x)),
              Phase("to rows", peers_r * convert, np.maximum(*in_r))]
    return Volumes(sent=sent, received=received, sent_t=sent_t, received_t=received_t,
                   allreduce=np.zeros(P, dtype=np.int64),
                   nnz=np.rint(nnz * np.diff(stage_ranges(f, Y))[y] / max(f, 1)
                               ).astype(np.int64),
                   messages=sum(p.latency for p in phases), phases=phases)


def plexus_counts(layout: Layout, pos: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """``cnt[p, b]``: the rows of part p (rank p's rows) in block b of the permuted order
    ``pos`` cut at ``bounds``."""
    nb = bounds.size - 1
    return np.bincount(layout.parts() * nb + np.searchsorted(bounds, pos, "right") - 1,
                       minlength=layout.k * nb).reshape(layout.k, nb)


def plexus_conversion(layout: Layout, cnt: np.ndarray, block: np.ndarray, size: np.ndarray,
                      w: np.ndarray, row: int) -> tuple[np.ndarray, np.ndarray]:
    """Per rank, the bytes (sent, received) converting its rows (``row`` bytes each, all
    features) to its block ``block`` (``size`` rows, ``w`` bytes each: its feature block):
    ``BlockConversion.to_blocks``; ``to_rows`` moves the same the other way."""
    own = cnt[np.arange(cnt.shape[0]), block]
    return layout.sizes * row - own * w, (size[block] - own) * w


def plexus_tile_nnz(layout: Layout, shape3: tuple[int, int, int]) -> np.ndarray:
    """Per rank (x, y, z): the non-zeros of its plexus3d tile A[R_z, C_x] (default seed)."""
    X, Y, Z = shape3
    n = int(layout.offsets[-1])
    row_pos, col_pos = plexus_orders(n, n)
    row_bounds, col_bounds, _ = plexus_blocks(shape3, n, n)
    A = layout.A
    tile_r = (np.searchsorted(row_bounds, row_pos, "right") - 1) // X
    tile_c = (np.searchsorted(col_bounds, col_pos, "right") - 1) // Z
    nnz = block_pairs(A.indptr, A.indices, tile_r, tile_c, Z, X)
    x, _, z = _coords(shape3, np.arange(X * Y * Z))
    return nnz[z, x]


def _one_part_per_rank(layout: Layout, P: int, c: int) -> None:
    if c != 1:
        raise SpmmgnnError("the 2D and 3D algorithms take a grid shape, not a replication c")
    if layout.k != P:
        raise SpmmgnnError(f"the partition has {layout.k} blocks; P = {P} expected (one part "
                           "per rank on a 2D/3D grid)")
