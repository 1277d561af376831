"""A checkpoint whose parameter, or optimizer state of a parameter, has another shape than
the model's is one error line naming the member and both shapes (``checkpoint.restore``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

TRAIN = ["train", "--csbm-n", "200", "--csbm-features", "16", "--hidden", "8", "--quiet"]


def _main(capsys, *argv) -> tuple[int, str]:
    from spmmgnn.cli import main

    code = main([str(a) for a in argv])
    return code, capsys.readouterr().err


def _rewrite(path: Path, name: str, change) -> None:
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    arrays[name] = change(arrays[name])
    with open(path, "wb") as fh:
        np.savez(fh, **arrays)


@pytest.mark.parametrize("member, change, words", [
    ("param/convs.0.weight", lambda a: a[:1], "param/convs.0.weight has shape (1, 8) in the "
     "checkpoint and (16, 8) in the model"),
    ("opt/0/exp_avg", lambda a: a.T.copy(), "opt/0/exp_avg (of convs.0.weight) has shape "
     "(8, 16) in the checkpoint and (16, 8) in the model"),
])
def test_a_member_of_another_shape_is_named_with_both_shapes(capsys, tmp_path, member, change,
                                                              words):
    ck = tmp_path / "ck.npz"
    code, err = _main(capsys, *TRAIN, "--epochs", "1", "--checkpoint", ck)
    assert code == 0, err
    with np.load(ck) as z:
        assert z[member].shape == (16, 8), z[member].shape  # 16 CSBM features -> 8 hidden
    _rewrite(ck, member, change)
    code, err = _main(capsys, *TRAIN, "--epochs", "2", "--checkpoint", ck, "--resume")
    assert code == 2 and err.count("error:") == 1 and "Traceback" not in err, err
    assert f"checkpoint {ck}: checkpoint parameters do not fit the model: {words}" in err, err
