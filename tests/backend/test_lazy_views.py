"""A torch tensor whose negative bit is set (``z.conj().imag``: a lazily negated view) is
refused by every call that reads a dense operand, on numpy and device grids alike, with one
collective error that names the fix (``x.resolve_neg()``), not a RuntimeError traceback or
a hint to change the dtype (``local_input_error``, ``convert.to_numpy``)."""

from __future__ import annotations

import pytest
import torch

from spmmgnn import SpmmgnnError
from spmmgnn.backend.convert import to_numpy

from ..mpi import run_mpi_json


def test_to_numpy_names_resolve_neg():
    x = torch.complex(torch.zeros(3), torch.arange(3.0)).conj().imag
    with pytest.raises(SpmmgnnError, match=r"negative bit set .* pass x.resolve_neg\(\)"):
        to_numpy(x, "features")
    assert to_numpy(x.resolve_neg(), "features").tolist() == [-0.0, -1.0, -2.0]


def test_every_call_refuses_a_negative_bit_tensor_on_both_grids(tmp_path):
    r = run_mpi_json(2, "lazy_views.py", tmp_path)
    for grid in ("numpy", "device"):
        got = r[grid]
        assert got.pop("resolved") < 1e-12, grid
        for call, message in got.items():
            assert message.startswith(f"True: {call}: the tensor is a lazy view with its "
                                      "negative bit set"), (grid, call, message)
            assert "pass x.resolve_neg()" in message and "x.double()" not in message
