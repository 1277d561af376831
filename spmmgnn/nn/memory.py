"""The dense part of a GCN training run's memory per rank: the model's shape and the bytes of
what scales with its widths (``benchmark.memory`` adds the operator's part; the trainer's
preflight checks these before building the model)."""

from __future__ import annotations

from dataclasses import dataclass

from .layers import aggregate_first, aggregation_chunk, trained_widths

SPLITS = 3  # train / val / test masks, one bool per row each
DENSE = ("features", "activations", "gradients", "parameters", "optimizer")


@dataclass
class ModelShape:
    """The GCN the memory is modelled for: widths ``f -> hidden x (layers - 1) -> classes``."""

    features: int
    hidden: int = 64
    classes: int = 8
    layers: int = 2
    itemsize: int = 4  # the training dtype (float32)

    @property
    def widths(self) -> list[int]:
        return [self.features] + [self.hidden] * (self.layers - 1) + [self.classes]

    def spmm_widths(self, codec: bool = False) -> list[tuple[int, bool]]:
        """(width, has a backward SpMM) of each SpMM an epoch runs: the first layer's
        aggregation of X is cached (no gradient; in column chunks without a codec), later
        layers ship the narrower side."""
        first = self.features if codec else aggregation_chunk(self.widths)
        return [(first, False)] + [(w, True) for w in trained_widths(self.widths)]

    def parameters(self) -> int:
        d = self.widths
        return sum(a * b + b for a, b in zip(d[:-1], d[1:], strict=True))


def dense_bytes(shape: ModelShape, rows) -> dict:
    """Bytes per rank (``rows``: the rank's rows, a number or an array of them) of
    ``DENSE``: the rank's rows of X, labels, vertex ids and split masks; what autograd keeps
    from the forward (the cached ``Â X``, each hidden layer's output, the aggregated input of
    an aggregate-first layer, the logits); the gradients alive at once in the backward of the
    widest layer; the replicated weights with the flat gradient buffer; Adam's two moments.
    Python ints (exact for any size) when ``rows`` is one."""
    s, d = shape.itemsize, shape.widths
    saved = d[0] + sum(d[1:-1]) + d[-1]  # cached A X, hidden outputs, logits
    for l in range(1, shape.layers):
        if aggregate_first(d[l], d[l + 1], True, True):
            saved += d[l]  # the aggregated input the layer's GEMM keeps
    # the backward of the widest layer: its output's and input's gradients, twice each
    # (the incoming one and the one computed from it)
    transient = max((2 * d[l] + 2 * d[l + 1] for l in range(1, shape.layers)),
                    default=2 * d[-1])
    weights = shape.parameters() * s
    return dict(features=rows * (d[0] * s + 8 + 8 + SPLITS), activations=rows * saved * s,
                gradients=rows * transient * s, parameters=2 * weights, optimizer=2 * weights)


def model_bytes(shape: ModelShape, rows: int) -> int:
    """The model's part of a run on a rank of ``rows`` rows: all of ``dense_bytes`` but the
    features, which are loaded already."""
    return sum(v for k, v in dense_bytes(shape, int(rows)).items() if k != "features")


def model_problem(shape: ModelShape, rows: int, ranks: int = 1,
                  node_need: int | None = None) -> str | None:
    """``machine.memory_problem`` of ``model_bytes`` on a rank of ``rows`` rows, ``ranks``
    ranks on this node (``node_need``: their ``model_bytes`` summed, when their rows
    differ); None when it fits."""
    from ..runtime.machine import memory_problem

    need = model_bytes(shape, rows)
    model = (f"{shape.layers} layers {shape.features} -> {shape.hidden} -> {shape.classes}"
             if shape.layers > 1 else f"1 layer {shape.features} -> {shape.classes}")
    return memory_problem(need, f"the model ({model}: weights, Adam's moments, activations "
                          f"and gradients of {rows} rows)", ranks, node_need)


@dataclass
class BlockPlace:
    """Where one rank keeps its activations in a block layout: ``rows`` of the row layout
    (its data, its logits), a block of ``block`` rows holding feature block ``index`` of
    ``split`` of every width (SUMMA: ``pc``, j; Plexus: Y, y). Plexus also gathers and
    reduces its tiles' ``lines`` rows (along x, along z) and holds the two tiles ``tiles``
    (their non-zeros) of ``tile_rows`` rows each."""

    layout: str                      # "grid" (train --grid-layout) or "plexus"
    rows: int
    block: int
    split: int
    index: int
    lines: tuple[int, int] = (0, 0)
    tiles: tuple[int, int] = (0, 0)
    tile_rows: tuple[int, int] = (0, 0)

    def share(self, w: int) -> int:
        return w // self.split + (self.index < w % self.split)


def block_bytes(shape: ModelShape, place: BlockPlace, cache: bool = True) -> dict:
    """Bytes per rank of a GCN trained in a block layout (``nn/grid_model.py``,
    ``nn/plexus_model.py``), by ``DENSE`` and ``tiles``, Python ints. Counted from what the
    layouts allocate: the row layout's data (``features``) plus the input's block (and
    SUMMA's cached ``A X`` gathered to full width); per layer what autograd keeps (SUMMA:
    the gathered ``H[U, :]`` its GEMM saves, the block in, the block out and its ReLU-dropout
    output; Plexus: the block in and three blocks out), the logits in rows and their
    gradient; ``gradients``: the largest transient of one layer's backward (SUMMA: the
    gathered output gradient and the products at full width; Plexus: the gathered and
    partial tile lines at the widest share, or the GEMM's full-width gradient); Plexus's two
    tiles as CSR (int64 pointers and permutation, int32 indices, float64 values)."""
    s, d, b, share = shape.itemsize, shape.widths, place.block, place.share
    dense = dense_bytes(shape, place.rows)
    logits = 2 * place.rows * d[-1] * s
    weights = max(a * c for a, c in zip(d[:-1], d[1:], strict=True)) * s
    pairs = list(zip(d[:-1], d[1:], strict=True))
    if place.layout == "grid":
        features = b * (share(d[0]) * s + 8) + (b * d[0] * s if cache else 0)
        saved = sum(b * s * (a + share(a) + 2 * share(c)) for a, c in pairs)
        transient = max(2 * b * s * (a + c) for a, c in pairs) + weights
        tiles = 0
    else:
        features = b * (share(d[0]) * s + 8)
        saved = sum(b * s * (share(a) + 3 * share(c)) for a, c in pairs)
        line = sum(place.lines)
        transient = max(max(3 * line * share(max(a, c)), 4 * b * c + 2 * b * a) * s
                        for a, c in pairs) + weights
        tiles = sum(16 * r + 8 + 12 * z for r, z in zip(place.tile_rows, place.tiles,
                                                        strict=True))
    return dict(features=dense["features"] + features, activations=saved + logits,
                gradients=transient, parameters=dense["parameters"],
                optimizer=dense["optimizer"], tiles=tiles)


def block_problem(shape: ModelShape, place: BlockPlace, ranks: int = 1,
                  cache: bool = True) -> str | None:
    """``machine.memory_problem`` of training in the block layout ``place`` (all of
    ``block_bytes`` but the row layout's data, loaded already); None when it fits."""
    from ..runtime.machine import memory_problem

    got = block_bytes(shape, place, cache)
    need = sum(v for k, v in got.items() if k != "features") + \
        got["features"] - dense_bytes(shape, place.rows)["features"]
    what = ("SUMMA's 2D/3D blocks (--grid-layout)" if place.layout == "grid" else
            "Plexus's blocks and tiles (--plexus-blocks)")
    return memory_problem(need, f"the model in {what}: {shape.layers} layers "
                          f"{' -> '.join(map(str, shape.widths))}, a block of {place.block} "
                          f"rows", ranks)
