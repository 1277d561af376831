"""Partitioning at the size users have (issue 47): the cost estimate and its refusal before
any work, ``default`` sending large graphs to KaMinPar alone, and a part vector made outside
(``partition --from-parts``) read, checked, written and trained on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from spmmgnn.data.generators import sbm
from spmmgnn.data.h5graph import read_block_row, read_offsets, write_graph
from spmmgnn.partitioners import api, contract, metrics, partition
from spmmgnn.partitioners import estimate as est_mod
from spmmgnn.partitioners.estimate import MEASURED, MEASURED_COARSE, MIB, estimate
from spmmgnn.runtime.errors import SpmmgnnError
from spmmgnn.runtime.machine import MEMORY_ENV

from ..mpi import run_mpi_json

ROOT = Path(__file__).resolve().parents[2]


def cli(*args, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "spmmgnn.cli", "partition", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env=dict(os.environ, **(env or {})))


def test_the_estimate_covers_every_measured_peak_and_grows_with_the_graph():
    for method, n, nnz, k, _, peak_mib in MEASURED:
        if method == "kaminpar" and contract.coarsened(n, k):
            continue  # a run of the path KaMinPar no longer takes there (MEASURED_COARSE)
        assert estimate(method, n, nnz, k).peak_bytes >= 0.999 * peak_mib * MIB
    assert MEASURED_COARSE
    for method, n, nnz, k, _, peak_mib in MEASURED_COARSE:  # (some with it forced)
        assert estimate(method, n, nnz, k).peak_bytes >= 0.999 * peak_mib * MIB
    for method in ("metis-vol", "kaminpar", "default", "mtkahypar", "metis-vol+multilevel"):
        small, large = estimate(method, 10**5, 10**6, 64), estimate(method, 10**7, 10**8, 64)
        assert 0 < small.peak_bytes < large.peak_bytes and 0 < small.seconds < large.seconds
    assert estimate("default", 10**7, 2 * 10**8, 64).method == "kaminpar"


def test_a_partition_that_cannot_fit_is_refused_before_any_work(monkeypatch):
    """An estimate above the memory available (set by ``SPMMGNN_AVAILABLE_MEMORY``) is one
    SpmmgnnError naming the need and what is available; no base partitioner starts."""
    A = sbm(2000, 10, avg_degree=8, mixing=0.2, seed=1)
    started = []
    real = api._base_parts
    monkeypatch.setattr(api, "_base_parts", lambda *a, **kw: started.append(a[0]) or real(
        *a, **kw))
    monkeypatch.setenv(MEMORY_ENV, "1000")
    with pytest.raises(SpmmgnnError, match="needs about .* more memory .* available"):
        partition(A, 4, method="metis-vol")
    assert started == []
    monkeypatch.setenv(MEMORY_ENV, str(64 * 2**30))
    assert partition(A, 4, method="metis-vol").k == 4 and started == ["metis-vol"]


def test_the_command_refuses_with_one_line_and_writes_nothing(tmp_path):
    """20 MB available: enough to read the file (its own preflight), not for the estimate
    of ``default`` (about 32 MB above the graph): the estimate line, then one error line."""
    src, out = tmp_path / "g.npz", tmp_path / "g.h5"
    sp.save_npz(src, sp.csr_matrix(sbm(20000, 20, avg_degree=10, seed=0)))
    proc = cli(src, "-k", 4, "-o", out, env={MEMORY_ENV: str(20 * 10**6)})
    assert proc.returncode != 0 and not out.exists()
    errors = [x for x in proc.stderr.splitlines() if "error" in x]
    assert len(errors) == 1 and "estimate fitted on measured rows" in errors[0], proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == errors[0]
    assert "partition: estimate for default k=4" in proc.stderr


def test_default_sends_a_large_graph_to_kaminpar_alone(monkeypatch):
    A = sbm(2000, 10, avg_degree=8, mixing=0.2, seed=1)
    monkeypatch.setattr(est_mod, "KAMINPAR_ONLY_NNZ", A.nnz)
    lines: list[str] = []
    P = partition(A, 4, method="default", threads=1, progress=lines.append)
    assert P.method == "kaminpar" and [c["method"] for c in P.candidates] == ["kaminpar"]
    assert any("KaMinPar alone" in x for x in lines)


def _write(path: Path, parts: np.ndarray, kind: str) -> None:
    if kind == "npy":
        np.save(path, parts)
    else:
        path.write_text("% made outside\n" + "\n".join(map(str, parts.tolist())) + "\n")


@pytest.mark.parametrize("kind", ["txt", "npy"])
def test_from_parts_round_trip(tmp_path, kind):
    """A part vector file written here (as dKaMinPar or ParMETIS would) is read, its metrics
    computed and the graph written with block b = part b; ``train``'s loading (P = 3 ranks)
    puts each vertex on the rank of its part."""
    A = sbm(900, 9, avg_degree=6, mixing=0.2, seed=2)
    k = 3
    given = np.random.default_rng(0).integers(0, k, A.shape[0])
    src, out, js = tmp_path / "src.h5", tmp_path / "g.h5", tmp_path / "m.json"
    pv = tmp_path / f"parts.{kind}"
    rng = np.random.default_rng(1)
    write_graph(src, A, features=rng.standard_normal((A.shape[0], 4)).astype(np.float32),
                labels=rng.integers(0, 3, A.shape[0]), num_classes=3)
    _write(pv, given, kind)
    proc = cli(src, "-k", k, "--from-parts", pv, "-o", out, "--json", js)
    assert proc.returncode == 0, proc.stderr
    perm, offsets = read_block_row(out).perm, read_offsets(out)
    parts = np.empty_like(given)
    parts[perm] = np.repeat(np.arange(k), np.diff(offsets))
    np.testing.assert_array_equal(parts, given)
    m, report = metrics(A, given, k), json.loads(js.read_text())
    assert (report["total_volume"], report["max_send"]) == (m.total_volume, m.max_send)
    assert report["method"] == f"from-parts:{pv.name}"
    rank = run_mpi_json(k, "rank_vertices.py", tmp_path, str(out))["rank"]
    np.testing.assert_array_equal(rank, given)


@pytest.mark.parametrize("content, k, why", [
    ("0\n1\n", 2, "has 2 entries but the graph has 30 vertices"),
    ("\n".join(["0"] * 29 + ["2"]), 2, "entry 29 is 2, outside [0, 2)"),
    ("\n".join(["0"] * 29 + ["-1"]), 2, "entry 29 is -1, outside [0, 2)"),
    ("\n".join(["0"] * 29 + ["1.5"]), 2, "entry 29 is 1.5, not an integer"),
    ("\n".join(["0"] * 29 + ["nan"]), 2, "entry 29 is nan"),
    ("\n".join(["0"] * 29 + ["x"]), 2, "not one integer part id per line"),
])
def test_a_bad_part_vector_is_one_clear_error(tmp_path, content, k, why):
    src, out, pv = tmp_path / "g.npz", tmp_path / "g.h5", tmp_path / "p.txt"
    sp.save_npz(src, sp.csr_matrix(sbm(30, 3, avg_degree=4, seed=0)))
    pv.write_text(content)
    proc = cli(src, "-k", k, "--from-parts", pv, "-o", out)
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert proc.returncode != 0 and not out.exists()
    assert len(lines) == 1 and why in lines[0], proc.stderr


def test_the_writer_relabels_in_one_copy():
    """``permute_csr`` (what ``write_partitioned`` relabels with) equals scipy's two fancy
    indexings, weights and index dtype kept."""
    from spmmgnn.data.graph import permute_csr

    A = sp.csr_array(sbm(700, 7, avg_degree=6, seed=3))
    A.data = np.random.default_rng(0).random(A.nnz)
    A.indices = A.indices.astype(np.int32)
    perm = np.random.default_rng(1).permutation(700)
    B = permute_csr(A, perm)
    assert B.indices.dtype == np.int32 and abs(B - A[perm][:, perm]).max() == 0
