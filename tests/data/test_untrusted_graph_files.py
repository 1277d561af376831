"""A ``.pt`` graph file is untrusted input: unpickling may call only the exact classes a PyG
``Data`` needs. A file whose unpickling would call a function of PyG's data package
(``extract_zip``, which unpacks an archive into any folder) is refused with one line naming
that global, and nothing is written."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from spmmgnn import SpmmgnnError
from spmmgnn.data.loaders import load_graph

pyg = pytest.importorskip("torch_geometric")

EVIL_GLOBAL = "torch_geometric.data.extract.extract_zip"


class _Unzip:
    """Pickles as a call of PyG's ``extract_zip(archive, folder)``."""

    def __init__(self, archive: Path, folder: Path):
        self.args = (str(archive), str(folder))

    def __reduce__(self):
        from torch_geometric.data import extract_zip

        return (extract_zip, self.args)


def _evil_pt(tmp_path: Path) -> tuple[Path, Path]:
    """A valid graph whose unpickling would unpack an archive into ``tmp_path/victim``:
    (the .pt file, the file it would write)."""
    archive = tmp_path / "payload.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("pwned.txt", "written while unpickling a graph")
    path = tmp_path / "evil.pt"
    torch.save({"edge_index": torch.tensor([[0, 1, 2], [1, 2, 0]]), "num_nodes": 3,
                "x": torch.ones(3, 2), "meta": _Unzip(archive, tmp_path / "victim")}, path)
    assert torch.serialization.get_unsafe_globals_in_checkpoint(str(path)) == [EVIL_GLOBAL]
    return path, tmp_path / "victim" / "pwned.txt"


def test_a_file_that_would_unpack_an_archive_is_refused(tmp_path):
    path, written = _evil_pt(tmp_path)
    with pytest.raises(SpmmgnnError) as exc:
        load_graph(path)
    assert f"refusing to unpickle {EVIL_GLOBAL}" in str(exc.value)
    assert not written.exists() and not written.parent.exists()


def test_partition_of_such_a_file_is_one_error_line(tmp_path):
    path, written = _evil_pt(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "spmmgnn.cli", "partition", str(path),
                           "-k", "2", "-o", str(tmp_path / "p.h5")], capture_output=True,
                          text=True, timeout=300, env=dict(os.environ, SPMMGNN_THREADS="1"))
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = [ln for ln in proc.stderr.splitlines() if "error:" in ln]
    assert len(lines) == 1 and EVIL_GLOBAL in lines[0], proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert not written.exists() and not (tmp_path / "p.h5").exists()


def test_pyg_data_still_loads(tmp_path):
    """``torch.save(Data)`` needs exactly the allowed classes: it still loads."""
    from torch_geometric.data import Data

    data = Data(x=torch.ones(4, 2), edge_index=torch.tensor([[0, 1, 2], [1, 2, 3]]),
                y=torch.tensor([0, 1, 0, 1]), train_mask=torch.tensor([1, 0, 1, 0]) > 0)
    path = tmp_path / "g.pt"
    torch.save(data, path)
    g = load_graph(path)
    assert g.n == 4 and g.adj.nnz == 3
    np.testing.assert_array_equal(g.masks["train"], [True, False, True, False])
