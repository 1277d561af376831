"""Label propagation and codecs in training, end to end through ``spmmgnn train``."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ..mpi import run_cli

SMALL = ["--csbm-n", "1500", "--csbm-degree", "8", "--epochs", "12", "--quiet"]


def train(P, tmp_path, name, *flags):
    out = tmp_path / f"{name}.json"
    proc = run_cli(P, "train", *SMALL, "--json", str(out), *flags, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


def losses(result):
    return np.array([r["loss"] for r in result["history"]])


@pytest.mark.slow
def test_label_propagation_is_partition_invariant_and_cache_exact(tmp_path):
    one = train(1, tmp_path, "p1", "--label-propagation", "0.3")
    three = train(3, tmp_path, "p3", "--label-propagation", "0.3")
    nocache = train(3, tmp_path, "p3nc", "--label-propagation", "0.3", "--no-cache")
    plain = train(3, tmp_path, "plain")
    np.testing.assert_allclose(losses(three), losses(one), rtol=1e-4)
    np.testing.assert_allclose(losses(nocache), losses(three), rtol=1e-4)
    # the shown vertices leave the loss: the loss is over fewer vertices than without LP
    assert not np.allclose(losses(plain), losses(three))
    assert one["config"]["label_propagation"] == 0.3


def test_int2_codec_trains_and_moves_fewer_bytes(tmp_path):
    base = train(2, tmp_path, "f32", "--no-cache", "--exchange", "flat")
    q = train(2, tmp_path, "int2", "--no-cache", "--codec", "int2")
    assert q["exchange"]["option"] == "flat"  # a codec: the messages it compresses, by default
    sent = sum(r["bytes_sent"] for r in base["ranks"])
    sent_q = sum(r["bytes_sent"] for r in q["ranks"])
    assert 0 < sent_q < sent / 5
    assert np.all(np.isfinite(losses(q)))
    assert losses(q)[-1] < losses(q)[0]  # it learns


def test_codec_with_oblivious_algorithm_is_a_clear_error(tmp_path):
    proc = run_cli(2, "train", *SMALL, "--algorithm", "oblivious1d", "--codec", "int2",
                   timeout=120)
    assert proc.returncode == 2
    assert "--algorithm oblivious1d does not compress its exchange" in proc.stderr
    assert "codec_backward" not in proc.stderr  # a keyword the user never typed
    assert "Traceback" not in proc.stderr
