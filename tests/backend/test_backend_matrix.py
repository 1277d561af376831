"""Every family on every backend and transport (``tests/backend/workers/backend_matrix.py``): host
numpy over MPI, torch tensors on the CPU over MPI (staged through host views) and over
``torch.distributed`` (Gloo), at P = 4, 6 and 8 (1D; 1.5D with c = 2; 2D on 2 x 2 and 2 x 3;
3D on the factors closest to a cube, 2 x 2 x 2 at P = 8). Each run's A X and Aᵀ Y equal
scipy's in float32 and float64 on a non-symmetric A with an empty row and an empty part, and
the three runs of a family send the same bytes, rank by rank."""

from __future__ import annotations

import pytest

from ..mpi import run_mpi_json

RUNS = ("none mpi", "cpu mpi", "cpu torch")


@pytest.mark.parametrize("P", [4, 6, 8])
def test_every_family_on_every_backend_and_transport(P, tmp_path):
    got = run_mpi_json(P, "backend_matrix.py", tmp_path, timeout=1200)
    families = sorted({key.split()[0] for key in got})
    assert len(families) == 11, families
    for family in families:
        runs = [got[f"{family} {run}"] for run in RUNS]
        for run, r in zip(RUNS, runs, strict=True):
            assert "error" not in r, (family, run, r.get("error"))
            assert r["err"] <= 1e-5, (family, run, r["err"])  # float32 against scipy
            assert r["transport"] == run.split()[1], (family, run, r["transport"])
        assert runs[0]["sent"] == runs[1]["sent"] == runs[2]["sent"], (family, runs)
        assert sum(runs[0]["sent"]) > 0, family  # something crossed ranks
