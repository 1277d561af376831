"""The operator's row algebra (``algorithms/linalg.py``, ``exchange/collectives.py``), the
delayed views (``algorithms/delayed.py``) and ``spmmgnn.krylov`` on a torch-cpu grid, over
MPI (the rows staged through host memory) and over Gloo (``transport="torch"``), against
the same calls on the host grid, under real ``mpiexec`` (tests/algorithms/workers/linalg_device.py):
P = 2 on a 1D grid and P = 4 on a 1.5D grid with c = 2, a square operator relabelled by a
part vector and a rectangular one with an empty block, both sides.

What must be equal: bit for bit where the arithmetic is the same (rows moved by
``fetch_rows`` and ``allgather_rows``, ``allreduce`` of the same numbers); to 1e-12
(relative to max(1, |value|)) where the local sums run in another order (float64 ``dot``,
``norm``, ``gram``, ``qr``; torch sums in float64 as numpy does, the order differs), and to
float32's rounding (2e-7) for float32 inputs. Every rank holds the same bits of every
reduction, and each call counts exactly what it staged as the ``device_host`` tier: the
f or f x f sums and factors both ways, the fetched and gathered rows over MPI, none of
the rows over Gloo.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from scipy.sparse.linalg import eigsh, spsolve

import spmmgnn
from spmmgnn import SpmmgnnError, krylov

from ..workers.krylov_cases import matrices

EXACT = ("fetch_rows", "fetch_rows_vector", "allgather_rows", "allreduce_tensor",
         "allreduce_max", "allreduce_bool", "allreduce_int", "allreduce_numpy")


def _tags(P: int) -> list[str]:
    c = 2 if P == 4 else 1
    return [f"c{c}:{transport}" for transport in ("mpi", "torch")]


def _linalg_keys(r: dict, P: int, suffix: str) -> list[str]:
    found = [k for k in r if k.endswith(f":{suffix}") and ":delayed:" not in k
             and ":krylov:" not in k and any(k.startswith(t + ":") for t in _tags(P))]
    assert found, suffix
    return found


def _call(key: str) -> str:
    return key.split(":")[-2]


@pytest.mark.parametrize("P", [2, 4])
def test_row_algebra_on_torch_cpu_equals_the_host_grid(P, mpi_json):
    r = mpi_json(P, "linalg_device.py")
    for k in _linalg_keys(r, P, "err"):
        limit = 2e-7 if ":float32:" in k else 1e-12
        assert r[k] <= limit, (k, r[k])
    exact = [k for k in _linalg_keys(r, P, "exact") if _call(k) in EXACT]
    assert len(exact) >= 2 * 2 * 2 * 8, exact  # transports x operators x sides x calls
    for k in exact:
        assert r[k] is True, k
    for k in _linalg_keys(r, P, "same_bits"):
        assert r[k] is True, k
    for tag in _tags(P):
        msgs = r[f"{tag}:err_numpy_on_device"]
        assert len(msgs) == P and len(set(msgs)) == 1, msgs
        assert "keeps its data on cpu" in msgs[0] and msgs[0].startswith("dot:"), msgs


@pytest.mark.parametrize("P", [2, 4])
def test_row_algebra_counts_what_it_stages(P, mpi_json):
    """Every call's device_host bytes, rank by rank, against what it stages (the worker's
    expectation: f float64 sums out and f results back for dot and norm, f x f for gram and
    each CholQR pass, the local R and its slice of the stacked Q for TSQR, and over MPI the
    rows asked of a rank and the distinct rows it asked, or every row of allgather_rows;
    over Gloo no rows)."""
    r = mpi_json(P, "linalg_device.py")
    keys = _linalg_keys(r, P, "bytes")
    assert any(":torch:" in k and "fetch_rows" in k for k in keys)
    for k in keys:
        assert r[k] == [], (k, r[k])


def test_delayed_views_on_torch_cpu_over_mpi_and_gloo(mpi_json):
    """cd-r (r = 2 with the local and the delayed backward, r = 3), 0c and the exact view of
    sparse1d on a torch-cpu grid, call by call against the host grid's views: products to
    1e-12, the same bytes sent, and the device_host bytes of the run equal to the halo
    bytes exchanged over MPI (each row staged once each way), 0 over Gloo."""
    r = mpi_json(2, "linalg_device.py")
    for tag in _tags(2):
        for mode in ("stale2", "stale2_delayed", "stale3", "drop", "exact"):
            key = f"{tag}:delayed:{mode}"
            assert r[f"{key}:err"] <= 1e-12, (key, r[f"{key}:err"])
            for flag in ("sent_same", "bytes", "moved"):
                assert r[f"{key}:{flag}"] is True, (key, flag)


def test_krylov_on_torch_cpu_over_mpi_and_gloo(mpi_json):
    """cg (a vector in float64, a float32 block from x0) and subspace iteration on a
    torch-cpu grid at P = 2 against scipy; results are tensors of the input's dtype (the
    grid's kind without x0); numpy input is one error on every rank."""
    r = mpi_json(2, "linalg_device.py")
    for tag in _tags(2):
        k = f"{tag}:krylov"
        assert r[f"{k}:cg_vector"] < 1e-8 and r[f"{k}:cg_block32"] < 1e-5, k
        assert r[f"{k}:eig_values"] < 1e-10 and r[f"{k}:eig_subspace"] < 1e-8, k
        for flag in ("cg_kind", "cg_block32_kind", "eig_kind"):
            assert r[f"{k}:{flag}"] is True, (k, flag)
        msgs = r[f"{k}:err_cg_numpy"]
        assert len(msgs) == 2 and all(m and "keeps its data on cpu" in m for m in msgs), msgs


def test_krylov_and_linear_operator_on_a_one_process_torch_grid():
    """P = 1 on a torch-cpu grid: cg and subspace iteration take and give tensors, the
    scipy LinearOperator view converts scipy's numpy vectors, and the values match scipy."""
    M, N = matrices(60)
    grid = spmmgnn.ProcessGrid(device="cpu")
    op = spmmgnn.DistSpMM.from_scipy(M, grid)
    ids = op.row_ids("input")
    b = np.random.default_rng(0).standard_normal(60)
    x, info = krylov.cg(op, torch.from_numpy(b[ids]), tol=1e-10)
    assert torch.is_tensor(x) and info.converged
    assert np.abs(x.numpy() - spsolve(sp.csc_array(M), b)[ids]).max() < 1e-8
    eop = spmmgnn.DistSpMM.from_scipy(N, grid)
    theta, Q, einfo = krylov.subspace_iteration(eop, 3, tol=1e-10)
    lam = eigsh(N, k=3, which="LM")[0]
    assert torch.is_tensor(Q) and einfo.converged
    assert np.allclose(theta, lam[np.argsort(-np.abs(lam))], atol=1e-10)
    lo = krylov.as_linear_operator(op)
    v = np.random.default_rng(1).standard_normal(60)
    assert np.allclose(lo @ v, M @ v) and np.allclose(lo.T @ v, M.T @ v)
    with pytest.raises(SpmmgnnError, match="keeps its data on cpu"):
        krylov.cg(op, b[ids])
