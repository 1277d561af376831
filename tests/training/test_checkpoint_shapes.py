"""A checkpoint that does not fit the run is refused: a parameter, or optimizer state of a
parameter, of another shape than the model's is one error line naming the member and both
shapes (``checkpoint.restore``), one message under ``mpiexec``, not one per rank; optimizer
state whose hyperparameters disagree with the checkpoint's signature is refused when it is
read (``checkpoint.read_meta``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from spmmgnn import SpmmgnnError

from ..mpi import one_line_error, run_cli

TRAIN = ["train", "--csbm-n", "200", "--csbm-features", "16", "--hidden", "8", "--quiet"]
MPI_TRAIN = ["train", "--csbm-n", "300", "--hidden", "8", "--quiet"]


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


def test_a_checkpoint_whose_optimizer_disagrees_with_its_signature_is_refused(tmp_path):
    import zipfile

    from mpi4py import MPI

    from spmmgnn import ProcessGrid
    from spmmgnn.data.csbm import csbm
    from spmmgnn.training import TrainConfig, Trainer, distribute_graph
    from spmmgnn.training.checkpoint import read_meta

    ck = tmp_path / "ck.npz"
    data = distribute_graph(csbm(n=300, seed=1), ProcessGrid(MPI.COMM_SELF), "gcn")
    cfg = dict(epochs=1, hidden=8, progress=False, checkpoint=str(ck))
    Trainer(data, TrainConfig(**cfg)).fit()
    with np.load(ck) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(str(arrays["meta"]))
    meta["param_groups"][0]["lr"] = 1e9
    arrays["meta"] = np.array(json.dumps(meta))
    with open(ck, "wb") as fh:
        np.savez(fh, **arrays)
    assert zipfile.is_zipfile(ck)
    with pytest.raises(SpmmgnnError, match=r"the optimizer state's lr 1000000000.0 differs "
                                           r"from the run's lr 0.01"):
        read_meta(ck)
    with pytest.raises(SpmmgnnError, match="the optimizer state's lr"):
        Trainer(data, TrainConfig(**dict(cfg, epochs=2, resume=True)))


def test_a_checkpoint_that_does_not_fit_is_one_message_not_one_per_rank(tmp_path):
    ck = tmp_path / "ck.npz"
    proc = run_cli(2, *MPI_TRAIN, "--epochs", "1", "--checkpoint", str(ck))
    assert proc.returncode == 0, proc.stderr[-3000:]
    with np.load(ck) as z:
        arrays = {k: z[k] for k in z.files}
    name = next(k for k in arrays if k.startswith("param/"))
    arrays[name] = arrays[name][:1]  # a cut array: the meta still reads
    with open(ck, "wb") as fh:
        np.savez(fh, **arrays)
    assert json.loads(str(arrays["meta"]))["epoch"] == 1
    proc = run_cli(2, *MPI_TRAIN, "--epochs", "2", "--checkpoint", str(ck), "--resume")
    one_line_error(proc, f"checkpoint {ck}: checkpoint parameters do not fit the model")
    assert "rank 1" not in proc.stderr and Path(ck).exists()
