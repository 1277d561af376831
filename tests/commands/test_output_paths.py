"""An output path that is one of the command's inputs, or another of its outputs, is one
error before any work (``commands.check_files``, called by ``cli.main`` for every command):
the input is never replaced and nothing is written. Paths are compared resolved, so a
symbolic or hard link to the input is the input. ``--checkpoint`` with ``--resume`` is read
and written legitimately."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
import torch

from spmmgnn.runtime.errors import SpmmgnnError

TRAIN = ["train", "--csbm-n", "200", "--epochs", "1", "--hidden", "4", "--quiet"]


def _main(capsys, *argv) -> tuple[int, str, str]:
    from spmmgnn.cli import main

    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def files(tmp_path) -> dict[str, Path]:
    """A graph as .mtx and as a PyG-style .pt dict, a part vector, and a checkpoint-like file."""
    A = sp.random(60, 60, density=0.1, random_state=0, format="csr")
    mtx = tmp_path / "g.mtx"
    scipy.io.mmwrite(mtx, A + A.T)
    pt = tmp_path / "d.pt"
    coo = (A + A.T).tocoo()
    torch.save({"edge_index": torch.tensor(np.vstack([coo.row, coo.col])), "num_nodes": 60,
                "x": torch.randn(60, 4), "y": torch.arange(60) % 2}, pt)
    parts = tmp_path / "p.txt"
    parts.write_text("\n".join(str(i % 2) for i in range(60)) + "\n")
    ck = tmp_path / "k.npz"
    ck.write_bytes(b"not really a checkpoint\n")
    return {"mtx": mtx, "pt": pt, "parts": parts, "ck": ck}


def _cases(f: dict[str, Path], tmp: Path) -> list[tuple[list, str, Path]]:
    """(argv, words of the error line, the file that must be kept as it was)."""
    h5 = tmp / "g.h5"
    link, hard = tmp / "link.mtx", tmp / "hard.mtx"
    link.symlink_to(f["mtx"])
    os.link(f["mtx"], hard)
    return [
        (["partition", f["mtx"], "-k", "2", "-o", h5, "--json", f["mtx"]],
         f"--json {f['mtx']} is the input file {f['mtx']} (graph)", f["mtx"]),
        (["partition", f["mtx"], "-k", "2", "-o", h5, "--json", h5],
         f"--json {h5} and -o {h5} are the same file", f["mtx"]),
        (["partition", f["mtx"], "-k", "2", "--from-parts", f["parts"], "-o", f["parts"]],
         f"-o {f['parts']} is the input file {f['parts']} (--from-parts)", f["parts"]),
        (["partition", f["mtx"], "-k", "2", "-o", link], f"-o {link} is the input file",
         f["mtx"]),
        (["partition", f["mtx"], "-k", "2", "-o", h5, "--json", hard],
         f"--json {hard} is the input file", f["mtx"]),
        ([*TRAIN, "--dataset", f["pt"], "--json", f["pt"]],
         f"--json {f['pt']} is the input file {f['pt']} (--dataset)", f["pt"]),
        ([*TRAIN, "--checkpoint", f["ck"], "--json", f["ck"]],
         f"--checkpoint {f['ck']} and --json {f['ck']} are the same file", f["ck"]),
        (["model", f["mtx"], "--P", "2", "--json", f["mtx"]],
         f"--json {f['mtx']} is the input file {f['mtx']} (graph)", f["mtx"]),
        (["datasets", "convert", f["mtx"], "--out", hard], f"--out {hard} is the input file",
         f["mtx"]),
    ]


def test_an_output_on_an_input_or_another_output_is_one_error(capsys, tmp_path, files):
    for argv, words, kept in _cases(files, tmp_path):
        before = {p: p.read_bytes() for p in files.values()}
        code, out, err = _main(capsys, *argv)
        assert code == 2 and err.count("error:") == 1 and "Traceback" not in err, (argv, err)
        assert words in err and "give another name" in err, (words, err)
        assert {p: p.read_bytes() for p in files.values()} == before, argv
        assert not (tmp_path / "g.h5").exists() and out == "", (argv, out)
        assert kept.read_bytes() == before[kept]


def test_resume_reads_and_writes_its_checkpoint(capsys, tmp_path):
    ck = tmp_path / "k.npz"
    assert _main(capsys, *TRAIN, "--checkpoint", ck)[0] == 0
    code, _, err = _main(capsys, *TRAIN, "--epochs", "2", "--checkpoint", ck, "--resume")
    assert code == 0, err


def test_specs_and_missing_inputs_are_not_files(tmp_path, monkeypatch):
    """An input that names no existing file (a generator spec) is not compared; outputs not
    made yet are compared by their resolved paths."""
    import argparse

    from spmmgnn.commands import check_files

    monkeypatch.chdir(tmp_path)
    args = argparse.Namespace(dataset="csbm", json="csbm", checkpoint=None,
                              file_inputs={"dataset": "--dataset"},
                              file_outputs={"json": "--json", "checkpoint": "--checkpoint"})
    check_files(args)
    args.checkpoint = str(tmp_path / "sub" / ".." / "csbm")
    with pytest.raises(SpmmgnnError, match="are the same file"):
        check_files(args)
