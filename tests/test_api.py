"""Public API behaviour under MPI: torch tensors, round trips, and collective errors."""

from __future__ import annotations

import pytest

from .mpi import run_cli, run_mpi_json

ERRORS = ["wrong_shape_one_rank", "nan_one_rank", "int_dtype", "partition_wrong_length",
          "partition_out_of_range", "sizes_wrong_sum", "col_partition_wrong_length", "matrix_inf",
          "unknown_algorithm", "grid_does_not_divide", "scatter_wrong_rows"]
_cache: dict = {}


def api(P, tmp_path_factory):
    if P not in _cache:
        _cache[P] = run_mpi_json(P, "api_cases.py", tmp_path_factory.mktemp(f"api{P}"))
    return _cache[P]


@pytest.mark.parametrize("P", [1, 3])
def test_torch_in_torch_out(P, tmp_path_factory):
    r = api(P, tmp_path_factory)
    assert r["torch_types"] == ["Tensor"] * 3
    assert r["torch_err"] < 1e-12
    assert r["roundtrip_exact"]
    assert all(s[1] == 1 for s in r["vector_shape"])
    assert r["still_works"]


@pytest.mark.parametrize("P", [1, 3])
@pytest.mark.parametrize("case", ERRORS + ["ranks_disagree_on_f"])
def test_errors_are_collective(P, case, tmp_path_factory):
    r = api(P, tmp_path_factory)
    if case == "ranks_disagree_on_f" and P == 1:
        pytest.skip("needs two ranks")
    msgs = r[case]
    assert len(msgs) == P
    assert all(m is not None for m in msgs), f"{case}: some rank did not raise: {msgs}"
    assert len(set(msgs)) == 1, f"{case}: ranks raised different messages: {msgs}"


def test_cli_error_is_one_line_and_nonzero():
    proc = run_cli(2, "spmm", "--replication", "3", "--scale", "6", timeout=120)
    assert proc.returncode != 0
    lines = [ln for ln in proc.stderr.splitlines() if "error:" in ln]
    assert len(lines) == 1, proc.stderr
    assert "replication c=3 does not divide" in lines[0]
    assert "Traceback" not in proc.stderr
