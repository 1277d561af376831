"""``spmmgnn.krylov``: conjugate gradients and subspace iteration as library calls on any
grid (P = 1 in process; P = 2 and P = 4 with 1.5D c = 2, 2D 2x2 and 3D 2x1x2 under mpiexec,
tests/workers/krylov_cases.py) against scipy.sparse.linalg, and the scipy LinearOperator
view, which only P = 1 may have."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from scipy.sparse.linalg import cg as scipy_cg
from scipy.sparse.linalg import eigsh, spsolve

import spmmgnn
from spmmgnn import SpmmgnnError, krylov

from ..workers.krylov_cases import matrices

GRIDS = {2: ["c1"], 4: ["c2", "2d", "3d"]}


@pytest.mark.parametrize("P", sorted(GRIDS))
def test_cg_and_eigenpairs_match_scipy_on_every_grid(P, mpi_json):
    r = mpi_json(P, "krylov_cases.py")
    for g in GRIDS[P]:
        for case in ("uneven", "empty"):
            t = f"{g}:{case}"
            assert r[f"{t}:cg_vector"] < 1e-8 and r[f"{t}:cg_block"] < 1e-8, t
            assert r[f"{t}:eig_values"] < 1e-10 and r[f"{t}:eig_subspace"] < 1e-8, t
            for flag in ("cg_vector_shape", "cg_converged", "cg_steps_same",
                         "cg_block_converged", "eig_converged", "eig_same_bits"):
                assert r[f"{t}:{flag}"] is True, (t, flag)


@pytest.mark.parametrize("P", sorted(GRIDS))
def test_refusals_are_collective_and_say_why(P, mpi_json):
    r = mpi_json(P, "krylov_cases.py")
    for g in GRIDS[P]:
        for key, words in (("err_not_spd", "not positive definite"),
                           ("err_not_symmetric", "not symmetric"),
                           ("err_linear_operator", "reduce this rank's rows only")):
            msgs = r[f"{g}:uneven:{key}"]
            assert len(msgs) == P and all(m and words in m for m in msgs), (g, key, msgs)


@pytest.fixture(scope="module")
def one_process():
    """A one-rank operator relabelled by a part vector and RCM (its rows are not in the
    caller's order), and the matrices."""
    M, N = matrices(120)
    parts = np.zeros(120, dtype=np.int64)
    return (spmmgnn.DistSpMM.from_scipy(M, partition=parts, reorder="rcm"),
            spmmgnn.DistSpMM.from_scipy(N), M, N)


def test_one_process_cg_torch_and_subspace(one_process):
    op, eop, M, N = one_process
    b = np.random.default_rng(0).standard_normal(120)
    ids = op.row_ids("input")
    x, info = krylov.cg(op, torch.from_numpy(b[ids]).float(), tol=1e-6)
    assert torch.is_tensor(x) and x.dtype == torch.float32 and info.converged
    assert np.abs(x.double().numpy() - spsolve(sp.csc_array(M), b)[ids]).max() < 1e-4
    theta, Q, einfo = krylov.subspace_iteration(eop, 3, tol=1e-10)
    lam = eigsh(N, k=3, which="LM")[0]
    assert einfo.converged and np.allclose(theta, lam[np.argsort(-np.abs(lam))], atol=1e-10)
    assert np.allclose(Q.T @ Q, np.eye(3), atol=1e-12)
    with pytest.raises(SpmmgnnError, match="need 1 <= k <= block <= n"):
        krylov.subspace_iteration(eop, 0)


def test_linear_operator_at_one_process_in_the_callers_order(one_process):
    op, _, M, _ = one_process
    lo = krylov.as_linear_operator(op)
    v = np.random.default_rng(1).standard_normal((120, 2))
    assert np.allclose(lo @ v[:, 0], M @ v[:, 0]) and np.allclose(lo @ v, M @ v)
    assert np.allclose(lo.T @ v[:, 1], M.T @ v[:, 1])
    x, status = scipy_cg(lo, v[:, 0], rtol=1e-10)
    assert status == 0 and np.allclose(M @ x, v[:, 0], atol=1e-8)


def test_rectangular_operator_is_refused():
    B = sp.random(5, 7, density=0.5, random_state=0, format="csr")
    op = spmmgnn.DistSpMM.from_scipy(B)
    with pytest.raises(SpmmgnnError, match="needs a square A"):
        krylov.cg(op, np.ones(7))
