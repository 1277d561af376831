"""The API research code uses: the registry after a bare import, PyG's edge_index and Data
(in-process and ``.pt`` files), the ``(x, op)`` layers against PyG's, and the example."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from spmmgnn.data.loaders import load_graph
from spmmgnn.data.pyg import graph_from_pyg

from ..mpi import run_mpi, run_mpi_json

ROOT = Path(__file__).resolve().parents[2]
pyg = pytest.importorskip("torch_geometric")


def test_registry_complete_after_bare_import():
    code = "import spmmgnn; print(sorted(spmmgnn.ALGORITHMS))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    names = ["oblivious1d", "sparse1d", "prepost1d", "featureparallel", "oblivious15d",
             "sparse15d", "oblivious2d", "sparse2d", "oblivious3d", "sparse3d", "plexus3d"]
    assert out.strip() == str(sorted(names))


@pytest.mark.parametrize("P", [1, 3])
def test_layers_and_from_edge_index_equal_pyg(P, tmp_path):
    """GCNConv (gcn_norm with remaining self loops, weighted and not) and SAGEConv-mean on a
    directed graph with self loops, duplicate edges and isolated vertices: outputs and the
    gradients w.r.t. weights and input equal PyG's in float64."""
    r = run_mpi_json(P, "pyg_cases.py", tmp_path)
    assert set(r) == {"gcn", "gcn_weighted", "sage"}
    for name, d in r.items():
        assert d["scale"] > 0.5, name
        for key in ("out", "grad_x", "grad_w"):
            assert d[key] <= 1e-12, f"{name} {key}: {d[key]}"


def _pyg_data():
    from torch_geometric.data import Data

    ei = torch.tensor([[0, 0, 1, 3, 3], [1, 2, 2, 0, 3]])  # 0->1, 0->2, 1->2, 3->0, 3->3
    return Data(x=torch.arange(10, dtype=torch.float32).reshape(5, 2), edge_index=ei,
                y=torch.tensor([0, 1, 1, 0, 2]), train_mask=torch.tensor([1, 1, 0, 0, 1]) > 0)


def test_pyg_data_direction_and_fields():
    g = graph_from_pyg(_pyg_data())
    expected = np.zeros((5, 5))
    for s, t in [(0, 1), (0, 2), (1, 2), (3, 0), (3, 3)]:
        expected[t, s] = 1.0  # row = target
    assert g.n == 5 and g.num_classes == 3
    np.testing.assert_array_equal(g.adj.toarray(), expected)
    np.testing.assert_array_equal(g.features, np.arange(10).reshape(5, 2))
    np.testing.assert_array_equal(g.masks["train"], [True, True, False, False, True])


@pytest.mark.parametrize("form", ["data", "dict"])
def test_pt_file_loads_like_in_process(form, tmp_path):
    data = _pyg_data()
    path = tmp_path / "g.pt"
    torch.save(data if form == "data" else data.to_dict(), path)
    g, ref = load_graph(path), graph_from_pyg(data)
    assert (g.adj != ref.adj).nnz == 0
    np.testing.assert_array_equal(g.labels, ref.labels)


def test_pt_file_with_arbitrary_object_is_refused(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"edge_index": torch.zeros(2, 1, dtype=torch.long), "f": Path("x")}, path)
    from spmmgnn import SpmmgnnError

    with pytest.raises(SpmmgnnError, match="refusing to unpickle pathlib"):
        load_graph(path)


def test_training_on_in_process_pyg_data(tmp_path):
    r = run_mpi_json(2, "pyg_train.py", tmp_path)
    assert r["n"] == 300 and r["final"]["train_acc"] > 0.4


@pytest.mark.slow
def test_custom_model_example_same_on_one_and_three_ranks(tmp_path):
    """examples/custom_model.py: a custom 3-layer model trained under mpiexec; float64 losses
    on 3 ranks, and on a 2 x 2 grid (P = 4, c = 2: the gradient and loss sums count every row
    once), equal those of one process (the distributed product is the same math)."""
    script = str(ROOT / "examples" / "custom_model.py")
    runs = {}
    for P, c in ((1, 1), (3, 1), (4, 2)):
        out = tmp_path / f"ex{P}.json"
        run_mpi(P, script, "--epochs", "15", "--n", "600", "--replication", str(c),
                "--json", str(out))
        runs[P] = json.loads(out.read_text())
    assert runs[1]["losses"][-1] < 0.8 * runs[1]["losses"][0]
    np.testing.assert_allclose(runs[3]["losses"], runs[1]["losses"], rtol=1e-10)
    np.testing.assert_allclose(runs[4]["losses"], runs[1]["losses"], rtol=1e-10)
    assert runs[4]["accuracy"] == runs[1]["accuracy"]
