"""Errors about the rows a call takes name the fix (issue 46): which side (input: X, the
rows of ``matmul``'s input, ``op.n_local_in``; output: ``A @ X``, ``op.n_local``), how many
rows that side has on this rank, that a 1-D vector is accepted, and how to get the rows
(``op.scatter_rows``, ``op.row_ids``). In-process at P = 1 on a rectangular 5 x 7 operator;
the mpiexec case (one rank wrong, every rank told) is in tests/nn/workers/row_params_cases.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

import spmmgnn
from spmmgnn import SpmmgnnError


@pytest.fixture(scope="module")
def op():
    B = sp.random(5, 7, density=0.5, random_state=0, format="csr")
    return spmmgnn.DistSpMM.from_scipy(B)


INPUT = ["7 rows of the input side", "op.n_local_in", "1-D vector",
         "op.scatter_rows(X)", "op.row_ids('input')"]
OUTPUT = ["5 rows of the output side", "op.n_local", "1-D vector",
          "op.scatter_rows(Y, side='output')", "op.row_ids('output')"]

CASES = {
    "matmul_vector": (lambda op: op.matmul(np.ones(5)), INPUT + ["got 5 rows;"]),
    "matmul_3d": (lambda op: op.matmul(np.ones((7, 2, 2))), INPUT + ["got shape (7, 2, 2)"]),
    "matmul_t": (lambda op: op.matmul_t(torch.ones(7, 3)), OUTPUT + ["got 7 rows (shape"]),
    "dot": (lambda op: op.dot(np.ones(5), np.ones(5)), INPUT + ["pass side='output'"]),
    "norm_output": (lambda op: op.norm(np.ones((7, 2)), side="output"),
                    OUTPUT + ["pass side='input'"]),
    "qr": (lambda op: op.qr(np.ones((4, 2))), INPUT + ["got 4 rows"]),
    "fetch_rows": (lambda op: op.fetch_rows(np.ones(5), [0]), INPUT),
    "gather_rows": (lambda op: op.gather_rows(np.ones(7)), OUTPUT),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_wrong_rows_name_side_count_and_fix(op, case):
    fn, words = CASES[case]
    with pytest.raises(SpmmgnnError) as info:
        fn(op)
    msg = str(info.value)
    for w in words:
        assert w in msg, (w, msg)


def test_vectors_of_the_right_side_are_accepted(op):
    """The calls the messages name take 1-D vectors of the side they name."""
    assert op.matmul(np.ones(7)).shape == (5,)
    assert op.matmul_t(np.ones(5)).shape == (7,)
    assert np.ndim(op.norm(np.ones(5), side="output")) == 0
    assert op.fetch_rows(np.arange(7.0), [3, 1]).tolist() == [3.0, 1.0]
