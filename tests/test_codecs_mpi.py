"""Codecs through the real row exchange of the sparse algorithms."""

from __future__ import annotations

import numpy as np
import pytest

from spmmgnn.codecs import CODECS

from .mpi import run_mpi_json

_cache: dict = {}


def results(P, algo, c, tmp_path_factory):
    if (P, algo) not in _cache:
        _cache[P, algo] = run_mpi_json(P, "codec_cases.py", tmp_path_factory.mktemp("codec"),
                                       algo, str(c))
    return _cache[P, algo]


@pytest.mark.parametrize(("P", "algo", "c"), [(3, "sparse1d", 1), (4, "sparse15d", 2)])
def test_codecs_through_the_exchange(P, algo, c, tmp_path_factory):
    r = results(P, algo, c, tmp_path_factory)
    A, X = np.array(r["A"]), np.array(r["X"], dtype=np.float32)
    exact, exact_t = A @ X, A.T @ X
    for res in r["results"]:
        codec = CODECS[res["codec"]]
        y, t = np.array(res["y"]), np.array(res["t"])
        if res["codec"] == "float32":
            np.testing.assert_allclose(y, exact, rtol=1e-5, atol=1e-5)
        if res["codec"].startswith("int"):
            # each fetched row is off by at most one step of its own range
            step = (X.max(axis=1) - X.min(axis=1)).astype(np.float64) * 1.01 / codec.qmax
            bound = np.abs(A) @ step
            assert np.all(np.abs(y - exact) <= bound[:, None] + 1e-5), res["codec"]
        else:
            np.testing.assert_allclose(y, exact, rtol=1e-2, atol=1e-2)
        rel_t = np.abs(t - exact_t).max() / np.abs(exact_t).max()
        assert rel_t < {"int2": 1.0, "int4": 0.2, "int8": 0.02}.get(res["codec"], 1e-2)
        width = codec.row_bytes(X.shape[1])
        for st in res["ranks"]:
            if c == 1:  # 1D: rows on the wire are exactly the partition's volumes
                b = st["block"]
                assert st["fwd"]["bytes_sent"] == res["send"][b] * width
                assert st["fwd"]["bytes_received"] == res["recv"][b] * width
                assert st["bwd"]["bytes_sent"] == res["recv"][b] * width
            for d in ("fwd", "bwd"):
                s = st[d]
                assert s["payload_bytes_sent"] + s["param_bytes_sent"] == s["bytes_sent"]
                assert s["param_bytes_sent"] * width == s["bytes_sent"] * codec.param_bytes
