"""Partitioners: valid, balanced, reproducible; the max-send refinement never hurts."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

from spmmgnn import SpmmgnnError
from spmmgnn.data.generators import rmat, sbm
from spmmgnn.data.h5graph import read_block_row
from spmmgnn.partitioners import METHODS, metrics, partition
from spmmgnn.partitioners.maxsend import refine_max_send
from spmmgnn.partitioners.model import ColumnNet, as_square_csr, load_cap, row_loads

GRAPH = rmat(9, 8, seed=3)  # 512 vertices, power-law
DIRECTED = sp.random(300, 300, density=0.02, random_state=5, format="csr")


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("k", [1, 2, 3, 7, 64, 600])
def test_every_method_returns_a_valid_partition(method, k):
    p = partition(GRAPH, k, method=method, seed=1, threads=1)
    n = GRAPH.shape[0]
    assert p.parts.shape == (n,) and p.parts.min() >= 0 and p.parts.max() < k
    assert p.sizes.sum() == n and p.sizes.size == k
    assert np.array_equal(np.sort(p.perm), np.arange(n))
    if k <= 7:  # enough vertices per part for the load cap to be attainable
        assert p.metrics.load_imbalance <= 0.03 + 1e-9, (method, k, p.metrics.load_imbalance)


@pytest.mark.parametrize("base", ["block", "random", "metis-vol", "kahypar", "mtkahypar"])
@pytest.mark.parametrize("graph", ["rmat", "directed"])
def test_refinement_never_raises_max_send_nor_breaks_balance(base, graph):
    """The max-send stage applied to a given balanced partition keeps it balanced and never
    makes its busiest sender busier."""
    A = GRAPH if graph == "rmat" else DIRECTED
    for k in (4, 16):
        start = partition(A, k, method=base, seed=2, threads=1)
        A2 = as_square_csr(A)
        loads = row_loads(A2)
        cap = load_cap(loads, k, 0.03)
        refined, _ = refine_max_send(ColumnNet.from_matrix(A2), loads, start.parts.copy(), k,
                                     cap, seed=2)
        before, after = start.metrics, metrics(A2, refined, k)
        assert after.nnz.max() <= max(cap, before.nnz.max()), (base, k)
        assert after.max_send <= before.max_send, (base, k, before.max_send, after.max_send)


@pytest.mark.parametrize("method", ["random", "metis-vol+maxsend", "kahypar", "mtkahypar"])
def test_reproducible_for_a_fixed_seed(method):
    a = partition(GRAPH, 8, method=method, seed=7, threads=1)
    b = partition(GRAPH, 8, method=method, seed=7, threads=1)
    assert np.array_equal(a.parts, b.parts)


def test_bad_arguments_are_clear_errors():
    with pytest.raises(SpmmgnnError, match="positive integer"):
        partition(GRAPH, 0)
    with pytest.raises(SpmmgnnError):
        partition(GRAPH, 4, method="nope")


def test_block_model_graph():
    A = sbm(2000, communities=20, avg_degree=10, seed=1)
    p = partition(A, 8, seed=1, threads=1)
    assert p.metrics.load_imbalance <= 0.03 + 1e-9


def test_partition_command_writes_h5_and_json(tmp_path):
    src = tmp_path / "g.npz"
    sp.save_npz(src, GRAPH)
    out, js = tmp_path / "g.h5", tmp_path / "m.json"
    proc = subprocess.run([sys.executable, "-m", "spmmgnn.cli", "partition", str(src), "-k", "4",
                           "-o", str(out), "--json", str(js)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    m = json.loads(js.read_text())
    assert m["k"] == 4 and "max_send" in m and "total_volume" in m
    blocks = [read_block_row(out, block=b) for b in range(4)]
    perm = blocks[0].perm
    A = GRAPH[perm][:, perm]
    for b in blocks:
        assert (b.adj != A[b.lo:b.hi]).nnz == 0
    bad = subprocess.run([sys.executable, "-m", "spmmgnn.cli", "partition", str(tmp_path / "x"),
                          "-k", "2", "-o", str(out)], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "does not exist" in bad.stderr
