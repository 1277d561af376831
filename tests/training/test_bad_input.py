"""Bad input and misuse end in one readable line (or a visible warning), never in silently
wrong numbers, a hang or a traceback. One test (or more) per case of the trust issue:

1. a split the user gives is never discarded (OGB folders, HDF5 masks): missing parts are
   drawn only outside the given ones, with a warning; overlapping parts are refused;
2. NaN / Inf in features, edge weights, ``--lr``, a checkpoint, or reached while training;
   the fused ReLU-dropout keeps NaN;
3. ``--resume`` refuses other data of the same shape and other mathematics (staleness);
4. tensors that require grad are refused by the SpMM API (``nn.spmm`` differentiates);
5. ranks asking for different operators or grids get an error, not a hang; ``sys.exit(3)``
   on one rank ends the job with status 3;
6. truncated checkpoints, labels >= num_classes, absurd label values: one line;
8. an unwritable ``--json`` fails before training; stale checkpoint temporaries are removed;
9. output files honour the umask; usage errors print once; ``--epochs 0``; a METIS file's
   direction; a partition with empty block rows warns.

(Case 7 and the bench / report / model inputs of 6 and 8 are in
``tests/benchmark/test_bench_inputs.py``.)
"""

from __future__ import annotations

import argparse
import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spmmgnn import SpmmgnnError
from spmmgnn.data.csbm import csbm
from spmmgnn.data.h5graph import write_graph
from spmmgnn.data.partitioned import write_partitioned
from spmmgnn.runtime.atomic import MARKER, _host

from ..mpi import one_line_error, run_cli, run_mpi

EPOCH = ["--hidden", "8", "--quiet"]


def _split_of(tmp_path, P: int, *flags: str) -> dict:
    out = tmp_path / f"split-{P}-{time.monotonic_ns()}.json"
    run_mpi(P, "split_masks.py", str(out), *flags)
    return json.loads(out.read_text())


# ------------------------------------------------------------------ 1. splits
def _ogb_folder(root: Path, g, splits: dict[str, np.ndarray], labels=None) -> Path:
    raw, split = root / "raw", root / "split" / "given"
    raw.mkdir(parents=True)
    split.mkdir(parents=True)
    A = g.adj.tocoo()
    np.savetxt(raw / "edge.csv", np.column_stack([A.col, A.row]), fmt="%d", delimiter=",")
    np.savetxt(raw / "node-feat.csv", g.features, fmt="%.6f", delimiter=",")
    np.savetxt(raw / "node-label.csv", g.labels if labels is None else labels, fmt="%d")
    for name, ids in splits.items():
        np.savetxt(split / f"{name}.csv", ids, fmt="%d")
    return root


@pytest.fixture(scope="module")
def small():
    return csbm(n=300, avg_degree=6, num_features=8, num_classes=4, seed=5)


def test_ogb_split_without_valid_keeps_train_and_test(tmp_path, small):
    rng = np.random.default_rng(0)
    ids = rng.permutation(small.n)
    train, test = np.sort(ids[:150]), np.sort(ids[150:270])
    folder = _ogb_folder(tmp_path / "ogb", small, dict(train=train, test=test))
    got = _split_of(tmp_path, 2, "--dataset", str(folder))
    assert got["train"] == train.tolist() and got["test"] == test.tolist()
    assert got["val"] == np.sort(ids[270:]).tolist()  # only what neither given part holds
    assert "not val" in got["note"] and "outside train, test" in got["note"]
    proc = run_cli(2, "train", "--dataset", str(folder), "--epochs", "1", *EPOCH)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("spmmgnn train: warning:") == 1, proc.stderr


def test_ogb_split_with_only_test_draws_train_outside_it(tmp_path, small):
    test = np.arange(0, small.n, 3)
    folder = _ogb_folder(tmp_path / "ogb", small, dict(test=test))
    got = _split_of(tmp_path, 2, "--dataset", str(folder))
    assert got["test"] == test.tolist()
    assert not set(got["train"]) & set(test.tolist())
    assert not set(got["val"]) & set(test.tolist())
    assert len(got["train"]) + len(got["val"]) == small.n - test.size
    assert 0.6 < len(got["train"]) / (small.n - test.size) < 0.9  # 75 % expected


def test_h5_missing_masks_keep_the_given_ones_at_any_P(tmp_path, small):
    masks = {"train": small.masks["train"], "test": small.masks["test"]}
    path = tmp_path / "g.h5"
    write_graph(path, small.adj, offsets=[0, 140, 300], features=small.features,
                labels=small.labels, masks=masks, num_classes=4)
    two = _split_of(tmp_path, 2, "--dataset", str(path))
    three = _split_of(tmp_path, 3, "--dataset", str(path))
    assert two["train"] == np.flatnonzero(masks["train"]).tolist()
    assert two["test"] == np.flatnonzero(masks["test"]).tolist()
    assert two["val"] == three["val"] == np.flatnonzero(small.masks["val"]).tolist()
    assert two["fingerprint"] == three["fingerprint"]


@pytest.mark.slow
def test_no_split_is_drawn_the_same_in_memory_and_from_a_file(tmp_path, small):
    g = csbm(n=300, avg_degree=6, num_features=8, num_classes=4, seed=5)
    g.masks = {}
    path = tmp_path / "g.h5"
    with pytest.warns(UserWarning, match="no train/val/test split given"):
        write_partitioned(g, path, 2, seed=0)
    nomask = tmp_path / "nomask.h5"
    write_graph(nomask, small.adj, offsets=[0, 300], features=small.features,
                labels=small.labels, num_classes=4)
    a = _split_of(tmp_path, 2, "--dataset", str(path))
    b = _split_of(tmp_path, 3, "--dataset", str(nomask))
    assert a["train"] == b["train"] and a["val"] == b["val"] and a["test"] == b["test"]
    assert b["note"] and "no train/val/test split given" in b["note"] and a["note"] is None
    assert sum(a["counts"].values()) == small.n


def test_overlapping_split_is_refused(tmp_path, small):
    masks = dict(small.masks)
    masks["test"] = masks["test"] | masks["train"][::-1]
    path = tmp_path / "g.h5"
    write_graph(path, small.adj, features=small.features, labels=small.labels, masks=masks,
                num_classes=4)
    shared = int((masks["train"] & masks["test"]).sum())
    proc = run_cli(2, "train", "--dataset", str(path), "--epochs", "1", *EPOCH)
    one_line_error(proc, f"train and test splits share {shared} vertices")


# ------------------------------------------------------------------ 2. NaN and Inf
def _h5(tmp_path, g, **changes) -> Path:
    arrays = dict(features=g.features, labels=g.labels, masks=g.masks, num_classes=4)
    arrays.update(changes)
    adj = arrays.pop("adj", g.adj)
    path = tmp_path / f"g{len(list(tmp_path.glob('*.h5')))}.h5"
    write_graph(path, adj, offsets=[0, 130, 300], **arrays)
    return path


def test_nan_feature_and_inf_weight_are_refused(tmp_path, small):
    x = small.features.copy()
    x[217, 3] = np.nan
    proc = run_cli(2, "train", "--dataset", str(_h5(tmp_path, small, features=x)),
                   "--epochs", "1", *EPOCH)
    one_line_error(proc, "1 vertices have NaN or Inf features (first: vertex 217)")
    A = small.adj.copy()
    A.data = A.data.astype(np.float64)
    A.data[A.indptr[40]] = np.inf
    proc = run_cli(2, "train", "--dataset", str(_h5(tmp_path, small, adj=A)),
                   "--epochs", "1", *EPOCH)
    one_line_error(proc, "NaN or Inf edge weights (first: vertex 40)")


@pytest.mark.parametrize("lr", ["nan", "inf"])
def test_non_finite_learning_rate_is_refused(lr):
    proc = run_cli(2, "train", "--csbm-n", "300", "--lr", lr, "--epochs", "1", *EPOCH)
    one_line_error(proc, f"--lr {lr}: must be a finite number")


def test_training_stops_when_the_loss_is_no_longer_finite():
    proc = run_cli(2, "train", "--csbm-n", "400", "--lr", "1e20", "--epochs", "20", *EPOCH)
    one_line_error(proc, "training stopped at epoch", "NaN or Inf on rank(s)")
    assert "done:" not in proc.stdout


def test_fused_relu_dropout_keeps_nan():
    from spmmgnn.nn.dropout import relu_dropout, vertex_dropout

    z = torch.tensor([[np.nan, 1.0, -1.0, np.nan], [2.0, np.nan, 0.5, -3.0]] * 50)
    ids = np.arange(z.shape[0])
    fused = relu_dropout(z, ids, 0.5, seed=1, step=2, layer=1)
    ref = vertex_dropout(torch.relu(z), ids, 0.5, seed=1, step=2, layer=1)
    np.testing.assert_array_equal(fused.numpy(), ref.numpy())  # NaN where z is NaN
    assert torch.isnan(fused).sum() == torch.isnan(z).sum()


def _short_run(path: Path, *flags: str, epochs: int = 2):
    proc = run_cli(2, "train", "--csbm-n", "400", "--epochs", str(epochs), *EPOCH,
                   "--checkpoint", str(path), *flags)
    assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture(scope="module")
def checkpoint_bytes(tmp_path_factory) -> bytes:
    """The checkpoint of one ``_short_run`` (2 epochs on CSBM 400, P = 2), made once for
    the tests that damage or refuse it."""
    ck = tmp_path_factory.mktemp("ck") / "ck.npz"
    _short_run(ck)
    return ck.read_bytes()


def _saved(tmp_path: Path, checkpoint_bytes: bytes) -> Path:
    """``checkpoint_bytes`` as ``tmp_path/ck.npz``: what ``_short_run`` leaves there."""
    ck = tmp_path / "ck.npz"
    ck.write_bytes(checkpoint_bytes)
    return ck


def _rewrite(path: Path, change) -> None:
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    change(arrays)
    with open(path, "wb") as fh:
        np.savez(fh, **arrays)


def test_checkpoint_with_nan_is_refused(tmp_path, checkpoint_bytes):
    ck = _saved(tmp_path, checkpoint_bytes)
    _rewrite(ck, lambda a: a["param/convs.0.weight"].__setitem__((0, 0), np.nan))
    proc = run_cli(2, "train", "--csbm-n", "400", "--epochs", "4", *EPOCH, "--checkpoint",
                   str(ck), "--resume")
    one_line_error(proc, "holds NaN or Inf in param/convs.0.weight")


# ------------------------------------------------------------------ 3. resume other data
@pytest.mark.slow
def test_resume_refuses_other_features_and_other_staleness(tmp_path, checkpoint_bytes):
    ck = _saved(tmp_path, checkpoint_bytes)
    proc = run_cli(2, "train", "--csbm-n", "400", "--epochs", "4", *EPOCH, "--checkpoint",
                   str(ck), "--resume", "--csbm-signal", "0.2")
    one_line_error(proc, "different run", "the features differ")
    assert "labels" not in proc.stderr and "structure" not in proc.stderr
    stale = tmp_path / "stale.npz"
    _short_run(stale, "--staleness", "2")
    proc = run_cli(2, "train", "--csbm-n", "400", "--epochs", "4", *EPOCH, "--checkpoint",
                   str(stale), "--resume")
    one_line_error(proc, "staleness 2 != 0")


@pytest.mark.slow
def test_resume_refuses_permuted_labels_and_accepts_other_P(tmp_path, small):
    path = _h5(tmp_path, small)
    ck = tmp_path / "ck.npz"
    flags = ["--dataset", str(path), *EPOCH, "--checkpoint", str(ck)]
    assert run_cli(2, "train", *flags, "--epochs", "2").returncode == 0
    resumed = run_cli(3, "train", *flags, "--epochs", "3", "--resume")  # same data, other P
    assert resumed.returncode == 0, resumed.stderr
    labels = small.labels.copy()
    labels[:100] = np.random.default_rng(1).permutation(labels[:100])
    other = _h5(tmp_path, small, labels=labels)
    proc = run_cli(2, "train", "--dataset", str(other), *EPOCH, "--checkpoint", str(ck),
                   "--epochs", "4", "--resume")
    one_line_error(proc, "the labels differ")


# ------------------------------------------------------------------ 4. requires_grad
def test_tensors_that_require_grad_are_refused(tmp_path):
    out = tmp_path / "grad.json"
    run_mpi(2, "bad_api.py", "grad", str(out))
    got = json.loads(out.read_text())
    for rank in got["messages"]:
        for what in ("matmul", "matmul_t", "scatter_rows"):
            assert "requires grad" in rank[what] and "spmmgnn.nn.spmm" in rank[what]
        assert "X.detach()" in rank["gather_rows"]
    assert got["grad_error"] < 1e-12  # nn.spmm's gradient is A.T @ 1


# ------------------------------------------------------------------ 5. hangs
def test_ranks_asking_for_different_operators_get_an_error(tmp_path):
    out = tmp_path / "algo.json"
    run_mpi(3, "bad_api.py", "algorithm", str(out), timeout=120)
    got = json.loads(out.read_text())
    # one message on every rank, naming the setting and each rank's value
    assert all("the ranks disagree on the operator: algorithm is sparse1d on rank 0 and "
               "oblivious1d on ranks 1 and 2" in r["algorithm"] for r in got)
    assert all("codec is int8 on rank 0 and int2 on ranks 1 and 2" in r["codec"] for r in got)
    assert all("the ranks disagree on the grid: replication is 1 on rank 0 and 3 on ranks 1 "
               "and 2" in r["grid"] for r in got)
    # 2D/3D grids: a shape other ranks do not share, a product other than P, an algorithm
    # of another dimension: one message on every rank, naming the fix
    # each rank's own grid, not rank 0's twice (issue 46)
    assert all("shape is 1x3 on rank 0 and 3x1 on ranks 1 and 2" in r["shape"] for r in got)
    assert all("the grid 2x2 has 4 ranks but P=3" in r["product"] and "1x3" in r["product"]
               for r in got)
    assert all("sparse3d runs on a 3d grid, not on this 2d grid (grid=3x1)" in r["wrong_kind"]
               and "--grid 2x2x2" in r["wrong_kind"] for r in got)


@pytest.mark.slow
def test_sys_exit_on_one_rank_ends_the_job_with_its_status():
    t0 = time.monotonic()
    proc = run_mpi(3, "bad_api.py", "exit", "3", check=False, timeout=120)
    assert proc.returncode == 3, proc.stderr[-3000:]
    assert "passed the barrier" not in proc.stdout
    assert "sys.exit(3) on rank 1 of 3" in proc.stderr
    assert time.monotonic() - t0 < 60
    caught = run_mpi(2, "bad_api.py", "exit-caught", check=False, timeout=120)
    assert caught.returncode == 0, caught.stderr[-3000:]
    assert caught.stdout.count(": done") == 2


# ------------------------------------------------------------------ 6. one line, no traceback
@pytest.mark.parametrize("damage", ["truncated", "empty"])
def test_damaged_checkpoint_is_one_line(tmp_path, checkpoint_bytes, damage):
    ck = _saved(tmp_path, checkpoint_bytes)
    data = ck.read_bytes()
    ck.write_bytes(data[: len(data) // 2] if damage == "truncated" else b"")
    proc = run_cli(2, "train", "--csbm-n", "400", "--epochs", "4", *EPOCH, "--checkpoint",
                   str(ck), "--resume")
    one_line_error(proc, "is not readable")


def test_label_beyond_num_classes_is_one_line(tmp_path, small):
    labels = small.labels.copy()
    labels[288] = 4
    proc = run_cli(2, "train", "--dataset", str(_h5(tmp_path, small, labels=labels)),
                   "--epochs", "1", *EPOCH)
    one_line_error(proc, "1 labels are >= num_classes 4 (first: vertex 288")


def test_absurd_label_is_one_line(tmp_path, small):
    labels = small.labels.copy()
    labels[7] = 2147483646
    folder = _ogb_folder(tmp_path / "ogb", small, {}, labels=labels)
    proc = run_cli(2, "train", "--dataset", str(folder), "--epochs", "1", *EPOCH)
    one_line_error(proc, "largest label 2147483646")


# ------------------------------------------------------------------ 8. lost work, leftovers
def test_unwritable_json_fails_before_training(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    proc = run_cli(2, "train", "--csbm-n", "300", "--epochs", "50", "--json",
                   str(afile / "run.json"))
    one_line_error(proc, "cannot write --json output")
    assert "epoch" not in proc.stderr.replace("--epochs", "")


def test_stale_checkpoint_temporaries_are_removed(tmp_path):
    ck = tmp_path / "ck.npz"
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    stale = tmp_path / f".ck.npz.{int(gone.stdout)}@{_host()}.k1ll3d00{MARKER}"
    stale.write_bytes(b"\0" * 1000)
    other = tmp_path / ".other.npz.abc.tmp"  # another target's: left alone
    user = tmp_path / ".ck.npz.k1ll3d.tmp"  # not named by spmmgnn: left alone
    for p in (other, user):
        p.write_bytes(b"x")
    _short_run(ck)
    assert not stale.exists() and other.exists() and user.exists()


# ------------------------------------------------------------------ 9. small things
@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_outputs_honour_the_umask(tmp_path, umask):
    old = os.umask(umask)
    try:
        out, ck = tmp_path / "run.json", tmp_path / "ck.npz"
        _short_run(ck, "--json", str(out), epochs=1)
    finally:
        os.umask(old)
    for p in (out, ck):
        assert stat.S_IMODE(p.stat().st_mode) == 0o666 & ~umask, p


def test_usage_errors_print_once():
    proc = run_cli(3, "train", "--no-such-flag")
    assert proc.returncode == 2
    assert proc.stderr.count("unrecognized arguments") == 1, proc.stderr
    assert "MPI_Abort" not in proc.stderr
    proc = run_cli(2, "train", "--help")
    assert proc.returncode == 0 and proc.stdout.count("usage:") == 1


def _parsers(parser):
    """``parser`` and every sub-command parser under it."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _parsers(sub)


def test_help_is_plain_text_with_each_default_once():
    from spmmgnn.cli import build_parser

    parsers = list(_parsers(build_parser()))
    texts = [p.format_help() for p in parsers]
    assert len(texts) > 10  # the commands and their sub-commands
    for p, text in zip(parsers, texts, strict=True):
        assert "``" not in text, text
        for action in p._actions:
            shown = p._get_formatter()._expand_help(action) if action.help else ""
            assert shown.count("(default") <= 1, (p.prog, shown)
    train = " ".join(next(t for t in texts if "usage: spmmgnn train" in t).split())
    assert "(default: 100)" in train and "(default: as --codec)" in train  # --epochs, ...
    assert "(default: None)" not in train


@pytest.mark.slow
def test_epochs_zero_and_a_finished_checkpoint(tmp_path, checkpoint_bytes):
    proc = run_cli(2, "train", "--csbm-n", "300", "--epochs", "0", *EPOCH)
    one_line_error(proc, "--epochs must be >= 1")
    assert "checkpoint" not in proc.stderr
    ck = _saved(tmp_path, checkpoint_bytes)
    proc = run_cli(2, "train", "--csbm-n", "400", "--epochs", "2", *EPOCH, "--checkpoint",
                   str(ck), "--resume")
    one_line_error(proc, "already holds 2 epochs", "--epochs larger than 2")
    assert "MPI_Abort" not in proc.stderr and "rank 0 of 2" not in proc.stderr


def test_metis_direction_follows_the_file(tmp_path):
    from spmmgnn.data.loaders import load_graph

    sym = tmp_path / "sym.graph"
    sym.write_text("3 2\n2\n1 3\n2\n")
    one_way = tmp_path / "one.graph"
    one_way.write_text("3 2\n2\n3\n\n")
    assert load_graph(sym).directed is False
    assert load_graph(one_way).directed is True


def test_more_block_rows_than_vertices_is_an_error(tmp_path):
    """Checked before anything of size k is allocated (issue 46: ``--parts 1000000000``
    allocated 7.45 GiB of block offsets first)."""
    g = csbm(n=40, avg_degree=4, seed=1)
    for k in (64, 10**12):
        with pytest.raises(SpmmgnnError, match=f"{k} block rows for 40 vertices: .* at most "
                                               "40 \\(--parts\\)"):
            write_partitioned(g, tmp_path / "g.h5", k)
    assert not (tmp_path / "g.h5").exists()


# ------------------------------------------------------------------ fuzzing checkpoints
@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.integers(0, 10**9), flips=st.lists(st.tuples(st.integers(0, 10**9),
                                                           st.integers(0, 255)), max_size=4))
def test_damaged_checkpoints_never_raise_anything_else(tmp_path, checkpoint_bytes, cut, flips):
    from spmmgnn.training.checkpoint import read_checkpoint

    data = bytearray(checkpoint_bytes[: cut % (len(checkpoint_bytes) + 1)])
    for pos, val in flips:
        if data:
            data[pos % len(data)] = val
    path = tmp_path / "fuzz.npz"
    path.write_bytes(bytes(data))
    try:
        meta, arrays = read_checkpoint(path)
    except SpmmgnnError:
        return
    assert isinstance(meta["epoch"], int) and all(np.isfinite(v).all() for v in
                                                  arrays.values() if v.dtype.kind == "f")


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(meta=st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                         lambda children: st.lists(children, max_size=3)
                         | st.dictionaries(st.sampled_from(["format", "epoch", "history",
                                                            "signature", "param_groups",
                                                            "lr", "x"]), children,
                                           max_size=5), max_leaves=12))
def test_malformed_checkpoint_meta_is_one_error(tmp_path, checkpoint_bytes, meta):
    from spmmgnn.training.checkpoint import FORMAT, read_checkpoint

    if isinstance(meta, dict):
        meta = dict(meta, format=FORMAT)
    path = tmp_path / "fuzz.npz"
    path.write_bytes(checkpoint_bytes)
    _rewrite(path, lambda a: a.__setitem__("meta", np.array(json.dumps(meta))))
    try:
        got, _ = read_checkpoint(path)
    except SpmmgnnError:
        return
    assert isinstance(got["history"], list) and isinstance(got["signature"], dict)


def test_row_hashes_of_empty_blocks():
    """An empty block row (P = 3 with a block of size 0) hashes to nothing, not an error."""
    from spmmgnn.local.hashing import hash_rows

    assert hash_rows(np.zeros((0, 4), np.float32)).shape == (0,)
    assert hash_rows(np.zeros((3, 0), np.float32)).tolist() == [0, 0, 0]
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    h = hash_rows(a)
    assert len(set(h.tolist())) == 3 and hash_rows(a[1:]).tolist() == h[1:].tolist()
