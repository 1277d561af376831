"""The per-call path of issue 46 on real MPI ranks (``tests/exchange/workers/percall_cases.py``):
persistent exchanges and probe all-reduce give scipy's numbers through changes of width,
dtype and direction, results stay the caller's, byte counters stay exact, a bad input on one
rank of 2 or 3 is one collective error on all of them (no hang: the launch has a timeout),
and no persistent request is left for MPI to free at exit."""

from __future__ import annotations

import json

import pytest

from ..mpi import run_mpi

WORDS = dict(nan_on_last_rank="matmul: input has NaN or Inf values",
             width_differs="matmul: ranks disagree on the number of columns or the dtype",
             rows_wrong="matmul: expected this rank's",
             matmul_vs_matmul_t="call different methods at the same time (matmul and "
                                "matmul_t)")


@pytest.fixture(scope="module", params=[(2, "auto"), (3, "auto"), (2, "0")],
                ids=["P2", "P3", "P2-no-persistent"])
def run(request, tmp_path_factory):
    """``SPMMGNN_PERSISTENT=0``: the path of an MPI 3 library (plain collectives)."""
    P, persistent = request.param
    out = tmp_path_factory.mktemp(f"percall-{P}-{persistent}") / "out.json"
    proc = run_mpi(P, "percall_cases.py", str(out), timeout=300,
                   env={"SPMMGNN_PERSISTENT": persistent})
    return P, json.loads(out.read_text()), proc.stderr


def test_calls_match_scipy_and_counters_stay_exact(run):
    P, got, _ = run
    for validate in ("True", "False"):
        for r, rank in enumerate(got[validate]):
            seq = rank["sequence"]
            assert seq["error"] < 1e-10, (P, validate, r, seq)
            assert seq["kept"] and seq["distinct"], (P, validate, r, seq)
            assert seq["bytes_ok"] and seq["exchanges_ok"], (P, validate, r, seq)
            assert rank["abandoned"] < 1e-12, (P, validate, r, rank["abandoned"])
    # the ranks moved rows at all (the counters are not trivially zero)
    assert any(rank["sequence"]["bytes"][0] > 0 for rank in got["True"])


def test_bad_input_on_one_rank_is_one_error_on_every_rank(run):
    P, got, _ = run
    bad = got["True"][0]["bad"]
    for case, words in WORDS.items():
        messages = bad[case]["messages"]
        assert len(messages) == P and len(set(messages)) == 1, (P, case, messages)
        assert messages[0].startswith("collective=True") and words in messages[0], (
            P, case, messages)
    for rank in got["True"]:
        assert all(c["after"] < 1e-12 for c in rank["bad"].values()), (P, rank["bad"])


def test_no_request_is_left_for_mpi_to_free(run):
    P, _, stderr = run
    assert "persistent request" not in stderr, stderr[-3000:]
