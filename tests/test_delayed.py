"""Delayed remote aggregates (DistGNN §5.3) at P = 2, 3, and in training.

The reference splits A by hand into the entries whose row and column have the same owner
(``own``) and the rest (``remote``): with staleness R, call t returns
``own @ X_t + remote @ X_{t-R}`` (no remote part for t < R) and the transpose
``own.T @ Y_t + remote.T @ Y_{t-R}``; drop (0c) returns ``own @ X_t``; R = 0 is ``A @ X_t``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from .mpi import run_cli, run_mpi_json

F, CALLS = 3, 6


def split(A: np.ndarray, offsets: list[int]) -> tuple[np.ndarray, np.ndarray]:
    owner = np.searchsorted(offsets, np.arange(A.shape[0]), side="right") - 1
    same = owner[:, None] == owner[None, :]
    return A * same, A * ~same


@pytest.mark.parametrize("P", [2, 3])
def test_delayed_views_match_the_hand_split(P, tmp_path):
    r = run_mpi_json(P, "delayed_cases.py", tmp_path)
    A = np.array(r["A"])
    own, remote = split(A, r["offsets"])
    assert np.count_nonzero(remote) > 0 and np.count_nonzero(own) > 0
    X = [np.random.default_rng(100 + t).standard_normal((A.shape[0], F)) for t in range(CALLS)]
    Y = [np.random.default_rng(200 + t).standard_normal((A.shape[0], F)) for t in range(CALLS)]
    for t in range(CALLS):
        got = {m: (np.array(v["z"][t]), np.array(v["t"][t])) for m, v in r["modes"].items()}
        np.testing.assert_allclose(got["exact"][0], A @ X[t], atol=1e-12)
        np.testing.assert_allclose(got["exact"][1], A.T @ Y[t], atol=1e-12)
        np.testing.assert_allclose(got["drop"][0], own @ X[t], atol=1e-12)
        np.testing.assert_allclose(got["drop"][1], own.T @ Y[t], atol=1e-12)
        z = own @ X[t] + (remote @ X[t - 2] if t >= 2 else 0)
        w = own.T @ Y[t] + (remote.T @ Y[t - 2] if t >= 2 else 0)
        np.testing.assert_allclose(got["stale2"][0], z, atol=1e-12, err_msg=f"call {t}")
        np.testing.assert_allclose(got["stale2"][1], w, atol=1e-12, err_msg=f"call {t}")


def _losses(tmp_path, name: str, *flags: str) -> list[float]:
    out = tmp_path / f"{name}.json"
    proc = run_cli(2, "train", "--csbm-n", "800", "--epochs", "8", "--hidden", "8", "--quiet",
                   "--json", str(out), *flags)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [h["loss"] for h in json.loads(out.read_text())["history"]]


def test_training_with_staleness_and_drop_remote(tmp_path):
    """cd-5 has no remote part in epochs 1-5, so it trains exactly like 0c there, then not;
    both differ from the exact run from epoch 1 on; staleness 0 is the exact run."""
    exact = _losses(tmp_path, "exact")
    zero = _losses(tmp_path, "zero", "--staleness", "0")
    cd5 = _losses(tmp_path, "cd5", "--staleness", "5")
    oc = _losses(tmp_path, "oc", "--drop-remote")
    assert zero == exact
    assert cd5[:5] == oc[:5]
    assert all(a != b for a, b in zip(cd5[5:], oc[5:], strict=True))
    assert oc[0] != exact[0]


def test_staleness_needs_sparse1d(tmp_path):
    proc = run_cli(2, "train", "--csbm-n", "300", "--epochs", "1", "--quiet",
                   "--algorithm", "oblivious1d", "--staleness", "2")
    assert proc.returncode == 2
    assert proc.stderr.count("need --algorithm sparse1d, got oblivious1d") == 1
