"""Default threads per rank from the affinity sets of the ranks on a node."""

from __future__ import annotations

import os

import pytest

from spmmgnn.threads import default_threads, fair_share


def test_unbound_ranks_split_the_node():
    cores = set(range(32))
    assert fair_share(cores, [cores] * 4) == 8
    assert fair_share(cores, [cores] * 3) == 10


def test_ranks_bound_to_disjoint_cores_keep_all_of_theirs():
    sets = [set(range(8 * r, 8 * r + 8)) for r in range(4)]  # 4 ranks x 8 cores each
    assert [fair_share(s, sets) for s in sets] == [8, 8, 8, 8]


def test_partly_shared_cores_count_by_share():
    a, b = {0, 1, 2, 3}, {2, 3, 4, 5}  # cores 2 and 3 shared by both
    assert fair_share(a, [a, b]) == 3 and fair_share(b, [a, b]) == 3
    assert fair_share({0}, [{0}] * 5) == 1  # never below one


def test_single_rank_gets_its_affinity(monkeypatch):
    monkeypatch.delenv("SPMMGNN_THREADS", raising=False)
    expected = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    if expected is None:
        pytest.skip("no sched_getaffinity")
    assert default_threads() == expected


def test_bad_environment_value_is_a_clear_error(monkeypatch):
    from spmmgnn import SpmmgnnError

    monkeypatch.setenv("SPMMGNN_THREADS", "two")
    with pytest.raises(SpmmgnnError, match="positive integer"):
        default_threads()


@pytest.mark.parametrize("P", [1, 2])
def test_library_calls_leave_the_callers_threads(tmp_path, P):
    """torch's count (set to 1 before numba's pool starts inside the library), OpenBLAS's
    (2) and numba's count in the calling thread (its default, 2) are the same after building
    an operator and running matmul, matmul_t, gram, qr and the nn layers as before; the
    library's own calls run at its count (1 from $SPMMGNN_THREADS)."""
    from .mpi import run_mpi_json

    env = {"NUMBA_NUM_THREADS": "2", "SPMMGNN_THREADS": "1"}
    states = run_mpi_json(P, "thread_state.py", tmp_path, env=env)
    assert len(states) == P
    for s in states:
        assert s["torch_after_build"] == 1
        assert s["before"] == {"torch": 1, "numba": 2, "blas": s["before"]["blas"]}
        assert set(s["before"]["blas"]) == {2}
        assert s["after"] == s["before"] == s["after_scope"]
        assert s["library"] == 1
        assert s["inside"]["numba"] == 1 and set(s["inside"]["blas"]) == {1}
        assert s["inside"]["torch"] == 1
