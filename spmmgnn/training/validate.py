"""One validation of training data, run on every path (in-memory graph, PyG, OGB, HDF5 block
rows) after each rank holds its rows: finite features and edge weights, labels in
[-1, num_classes) with a sane class count, disjoint split parts, a non-empty training set.

Each rank checks its own rows; the counts (and the first offending vertex id, in the source
graph's numbering) are reduced over the ranks that hold distinct rows, so every rank builds the
same message and raises the same one-line ``SpmmgnnError`` -- no rank hangs, none trains on
garbage.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from ..data.splits import SPLITS, split_overlaps
from ..runtime.errors import collective_error

MAX_CLASSES = 2**20  # a class count beyond this is a label column of ids, not of classes
NONE = np.iinfo(np.int64).max


def _first(vertex_ids: np.ndarray, bad: np.ndarray) -> int:
    """Smallest vertex id among the flagged rows (NONE if there is none)."""
    return int(vertex_ids[bad].min()) if bad.any() else NONE


def nonfinite_rows(block) -> np.ndarray:
    """Rows of a CSR block row holding a NaN or Inf value (bool per row), in chunks of the
    values so that no flag array of every non-zero is made at once."""
    indptr, data = block.indptr, block.data
    rows = np.zeros(indptr.size - 1, dtype=bool)
    step = 1 << 22
    for a in range(0, data.size, step):
        bad = np.flatnonzero(~np.isfinite(data[a:a + step]))
        if bad.size:
            rows[np.searchsorted(indptr, bad + a, side="right") - 1] = True
    return rows


def check_training_rows(rows_comm: MPI.Comm, name: str,
                        vertex_ids: np.ndarray, features: np.ndarray, labels: np.ndarray,
                        masks: dict[str, np.ndarray], num_classes: int | None,
                        bad_weights: np.ndarray | None = None,
                        bad_normalized: np.ndarray | None = None) -> tuple[int, dict[str, int]]:
    """Collective over ``rows_comm`` (one rank per block row; every replica group of a 1.5D
    grid reduces the same rows, so all ranks reach the same verdict).

    ``bad_weights`` / ``bad_normalized``: this rank's rows with NaN or Inf values in its
    block row before and after normalization (``nonfinite_rows``), when the rank normalized
    them (the HDF5 path); None when root checked the whole matrix. ``num_classes``: the
    data's declared class count, or None to take the largest label + 1. Returns
    (num_classes, global count per split); raises the same SpmmgnnError on every rank when
    anything is wrong.
    """
    ids = np.asarray(vertex_ids, dtype=np.int64)
    labels = np.asarray(labels, dtype=np.int64)
    bad_x = ~np.isfinite(features).all(axis=1) if features.size else np.zeros(ids.size, bool)
    bad_w = bad_n = np.zeros(ids.size, dtype=bool)
    if bad_weights is not None:
        bad_w = bad_weights
    if bad_normalized is not None:
        bad_n = bad_normalized
    low = labels < -1
    declared = NONE if num_classes is None else int(num_classes)
    high = labels >= declared if num_classes is not None else np.zeros(ids.size, bool)
    sums = np.concatenate([
        [bad_x.sum(), bad_w.sum(), bad_n.sum(), low.sum(), high.sum()],
        split_overlaps(masks), [masks[s].sum() for s in SPLITS]]).astype(np.int64)
    mins = np.array([-int(labels.max(initial=-1)), _first(ids, bad_x), _first(ids, bad_w),
                     _first(ids, bad_n), _first(ids, low), _first(ids, high)], dtype=np.int64)
    rows_comm.Allreduce(MPI.IN_PLACE, sums, op=MPI.SUM)
    rows_comm.Allreduce(MPI.IN_PLACE, mins, op=MPI.MIN)
    n_x, n_w, n_n, n_low, n_high, *rest = (int(v) for v in sums)
    overlaps, counts = rest[:3], dict(zip(SPLITS, rest[3:], strict=True))
    top, f_x, f_w, f_n, f_low, f_high = (int(v) for v in mins)
    top = -top
    problems = []
    if n_x:
        problems.append(f"{n_x} vertices have NaN or Inf features (first: vertex {f_x})")
    if n_w:
        problems.append(f"{n_w} vertices have NaN or Inf edge weights (first: vertex {f_w})")
    if n_n and not n_w:
        problems.append(f"the normalized adjacency has NaN or Inf values in {n_n} rows (first: "
                        f"vertex {f_n}); negative edge weights can make a degree 0 or "
                        "negative")
    if n_low:
        problems.append(f"{n_low} labels are below -1 (first: vertex {f_low}); use -1 for "
                        "unlabelled vertices")
    classes = top + 1 if num_classes is None else declared
    if num_classes is not None and not 1 <= declared <= MAX_CLASSES:
        problems.append(f"num_classes {declared} (largest label {top}) is out of range [1, "
                        f"{MAX_CLASSES}]; labels must be class ids 0..C-1")
    elif n_high:
        problems.append(f"{n_high} labels are >= num_classes {declared} (first: vertex "
                        f"{f_high}, largest label {top})")
    elif num_classes is None and classes > MAX_CLASSES:
        problems.append(f"the largest label {top} implies {classes} classes, more than the "
                        f"{MAX_CLASSES} supported; labels must be class ids 0..C-1")
    elif classes < 1:
        problems.append("no vertex has a label")
    elif classes < 2:
        problems.append("the labels have one class: a classifier needs at least 2 (with one, "
                        "every prediction is right and the loss is 0)")
    if features.ndim == 2 and features.shape[1] == 0:
        problems.append(f"the features have 0 columns (shape {features.shape}): give at least "
                        "one")
    for (a, b), shared in zip((("train", "val"), ("train", "test"), ("val", "test")),
                              overlaps, strict=True):
        if shared:
            problems.append(f"the {a} and {b} splits share {shared} vertices")
    if not problems and counts["train"] == 0:
        problems.append("the training split is empty (no labelled vertex in it)")
    if problems:
        raise collective_error(f"{name}: " + "; ".join(problems))
    return classes, counts
