"""Public API behaviour under MPI: torch tensors, round trips, and collective errors."""

from __future__ import annotations

import pytest

from ..mpi import run_cli

ERRORS = ["wrong_shape_one_rank", "nan_one_rank", "int_dtype", "partition_wrong_length",
          "partition_out_of_range", "sizes_wrong_sum", "col_partition_wrong_length", "matrix_inf",
          "unknown_algorithm", "grid_does_not_divide", "scatter_wrong_rows"]
def expected(case: str, P: int) -> list[str]:
    """What each message must say (the problem, the values, where), for n = 31 rows."""
    last_rows = {1: 31, 3: 10}[P]  # 31 rows in P near-equal blocks: the last rank's share
    where = ["(rank 0)"] if P > 1 else []  # one rank: no need to say which
    return {
        "wrong_shape_one_rank": ["matmul", f"{last_rows} rows", f"({last_rows + 1}, 3)"]
        + ([f"(rank {P - 1})"] if P > 1 else []),
        "nan_one_rank": ["NaN or Inf", *where],
        "int_dtype": ["float32 or float64", "int64"],
        "ranks_disagree_on_f": ["disagree on the number of columns"],
        "partition_wrong_length": ["partition (rows of A)", "length 34", "n=31"],
        "partition_out_of_range": [f"[0, {P})", f"[{P}, {P}]"],
        "sizes_wrong_sum": ["sum to 32", "31 rows"],
        "col_partition_wrong_length": ["col_partition (columns of A)", "length 31", "n=32"],
        "matrix_inf": ["NaN or Inf"],
        "unknown_algorithm": ["'nope'", "sparse1d"],
        "grid_does_not_divide": [f"c={P + 1}", f"P={P}"],
        "scatter_wrong_rows": ["31 rows", "(30, 2)"],
    }[case]


def api(P, mpi_json):
    return mpi_json(P, "api_cases.py")


@pytest.mark.parametrize("P", [1, 3])
def test_torch_in_torch_out(P, mpi_json):
    r = api(P, mpi_json)
    assert r["torch_types"] == ["Tensor"] * 3
    assert r["torch_err"] < 1e-12
    assert r["roundtrip_exact"]
    assert all(len(s) == 1 for s in r["vector_shape"])  # a vector in, this rank's vector out
    assert r["still_works"]


@pytest.mark.parametrize("P", [1, 3])
@pytest.mark.parametrize("case", ERRORS + ["ranks_disagree_on_f"])
def test_errors_are_collective(P, case, mpi_json):
    r = api(P, mpi_json)
    if case == "ranks_disagree_on_f" and P == 1:
        pytest.skip("needs two ranks")
    msgs = r[case]
    assert len(msgs) == P
    assert all(m is not None for m in msgs), f"{case}: some rank did not raise: {msgs}"
    assert len(set(msgs)) == 1, f"{case}: ranks raised different messages: {msgs}"
    for fragment in expected(case, P):
        assert fragment in msgs[0], f"{case}: {fragment!r} not in {msgs[0]!r}"


def test_cli_error_is_one_line_and_nonzero():
    proc = run_cli(2, "spmm", "--replication", "3", "--scale", "6", timeout=120)
    assert proc.returncode != 0
    lines = [ln for ln in proc.stderr.splitlines() if "error:" in ln]
    assert len(lines) == 1, proc.stderr
    assert "replication c=3 does not divide" in lines[0]
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("name", ["oblivious1d", "sparse1d", "prepost1d", "featureparallel",
                                  "oblivious15d", "sparse15d", "oblivious2d", "sparse2d",
                                  "oblivious3d", "sparse3d", "plexus3d"])
def test_capabilities_are_what_the_algorithm_does(name):
    """The class attributes the trainer, the volume model and the sweep read instead of the
    name: a codec is taken exactly where ``takes_codecs`` says (checked in-process, P = 1),
    and the flags are the documented ones."""
    import numpy as np
    import scipy.sparse as sp
    from mpi4py import MPI

    import spmmgnn
    from spmmgnn.runtime.errors import SpmmgnnError

    cls = spmmgnn.ALGORITHMS[name]
    one, one5 = ("1d",), ("1d", "1.5d")
    expected = {"oblivious1d": (one, False, False), "sparse1d": (one, True, True),
                "prepost1d": (one, True, False), "featureparallel": (one, False, False),
                "oblivious15d": (one5, False, False), "sparse15d": (one5, True, False),
                "oblivious2d": (("2d",), False, False), "sparse2d": (("2d",), True, False),
                "oblivious3d": (("3d",), False, False), "sparse3d": (("3d",), True, False),
                "plexus3d": (("3d",), False, False)}
    assert (cls.grid_kinds, cls.takes_codecs, cls.delayed_remote) == expected[name]
    A = sp.random(40, 40, density=0.1, format="csr", random_state=0)
    shape = {"1d": None, "2d": (1, 1), "3d": (1, 1, 1)}[cls.grid_kinds[-1].replace("1.5d", "1d")]
    grid = spmmgnn.ProcessGrid(MPI.COMM_SELF, shape=shape)
    for kind, other in (("1d", spmmgnn.ProcessGrid(MPI.COMM_SELF)),
                        ("2d", spmmgnn.ProcessGrid(MPI.COMM_SELF, shape=(1, 1))),
                        ("3d", spmmgnn.ProcessGrid(MPI.COMM_SELF, shape=(1, 1, 1)))):
        if kind not in cls.grid_kinds:   # the wrong grid is one clear error, before any work
            with pytest.raises(SpmmgnnError, match=f"{name} runs on a .* grid, not on this "
                                                   f"{kind} grid"):
                spmmgnn.DistSpMM.from_scipy(A, other, algorithm=name)
    if cls.takes_codecs:
        op = spmmgnn.DistSpMM.from_scipy(A, grid, algorithm=name, codec="int8")
        x = op.scatter_rows(np.ones((40, 4)))
        assert np.allclose(op.gather_rows(op.matmul(x)), A @ np.ones((40, 4)))
    else:
        with pytest.raises(SpmmgnnError):
            spmmgnn.DistSpMM.from_scipy(A, grid, algorithm=name, codec="int8")
    # exchange="node" / "auto" exactly where takes_exchange says (the sparse algorithms)
    assert cls.takes_exchange == cls.takes_codecs
    for exchange in ("node", "auto"):
        if cls.takes_exchange:
            op = spmmgnn.DistSpMM.from_scipy(A, grid, algorithm=name, exchange=exchange)
            x = op.scatter_rows(np.ones((40, 4)))
            assert np.allclose(op.gather_rows(op.matmul(x)), A @ np.ones((40, 4)))
            assert op.comm_stats()["exchange"]["option"] == exchange
        else:
            with pytest.raises(SpmmgnnError, match="no halo exchange to make node-aware"):
                spmmgnn.DistSpMM.from_scipy(A, grid, algorithm=name, exchange=exchange)
    with pytest.raises(SpmmgnnError, match="exchange must be one of flat, node, auto"):
        spmmgnn.DistSpMM.from_scipy(A, grid, algorithm=name, exchange="tree")
