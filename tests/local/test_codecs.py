"""Codecs: stochastic quantization is unbiased and within one step, casts round correctly,
constant rows are exact, NaN is caught, and the wire sizes meet the compression targets."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from spmmgnn import set_threads
from spmmgnn.local.codecs import CODECS, get_codec
from spmmgnn.runtime.errors import SpmmgnnError

from ..brute import QMAX, step_bound

NO_INDEX = np.zeros(0, dtype=np.int64)


def roundtrip(codec, x, key=1, idx=NO_INDEX):
    m = idx.size if idx.size else x.shape[0]
    buf = np.empty((m, codec.row_bytes(x.shape[1])), dtype=np.uint8)
    bad = codec.encode(x, idx, buf, key)
    out = np.zeros((m, x.shape[1]), dtype=x.dtype)
    codec.decode(buf, out, NO_INDEX, accumulate=False)
    return out, bad


def step_of(codec, x):
    """The bound on one rounding step, from the definition (not from the codec's code)."""
    return step_bound(x, QMAX[codec.name])


@pytest.mark.parametrize("name", ["int8", "int4", "int2"])
def test_quantization_error_within_one_step(name):
    codec = CODECS[name]
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((300, 37)) * rng.uniform(1e-6, 1e3, (300, 1))).astype(np.float32)
    y, bad = roundtrip(codec, x)
    assert bad == 0
    step = step_of(codec, x)[:, None]
    assert np.all(np.abs(y.astype(np.float64) - x) <= step * (1 + 1e-6))


@pytest.mark.parametrize("name", ["int4", "int2"])
def test_quantization_is_unbiased(name):
    """The mean of T independent quantizations converges to x like 1/sqrt(T)."""
    codec = CODECS[name]
    rng = np.random.default_rng(1)
    x = rng.standard_normal((64, 16)).astype(np.float32)
    step = step_of(codec, x)[:, None]
    # every row has its own random stream: T stacked copies are T independent trials
    trials = roundtrip(codec, np.tile(x, (4096, 1)), key=7)[0].reshape(4096, *x.shape)
    errors = {t: np.abs(trials[:t].mean(axis=0) - x).max() / step.max()
              for t in (16, 256, 4096)}
    # std of one quantization <= step/2, so the mean's max error ~ 4 * step / (2 sqrt(T))
    assert errors[4096] < 4 / np.sqrt(4096)
    assert errors[4096] < errors[16] / 6  # ~16x fewer trials -> ~4x the error, up to noise


def test_constant_rows_are_exact_and_nan_is_flagged():
    codec = CODECS["int2"]
    x = np.array([[0.1] * 5, [-3.7e-20] * 5, [0.0] * 5, [1, 2, 3, 4, 5]], dtype=np.float32)
    y, bad = roundtrip(codec, x)
    assert bad == 0
    np.testing.assert_array_equal(y[:3], x[:3])
    x[3, 2] = np.nan
    y, bad = roundtrip(codec, x)
    assert bad == 1 and np.all(np.isnan(y[3]))
    x[3, 2] = np.inf
    assert roundtrip(codec, x)[1] == 1
    assert roundtrip(CODECS["float16"], x)[1] == 1


def test_wire_sizes_meet_compression_targets():
    f32 = {f: f * 4 for f in (16, 128)}
    ratio = {name: {f: f32[f] / CODECS[name].row_bytes(f) for f in f32} for name in CODECS}
    assert ratio["int2"][128] >= 14 and ratio["int2"][16] >= 7.5
    assert ratio["int4"][128] >= 7.5 and ratio["int4"][16] >= 5
    assert ratio["int8"][128] >= 3.8 and ratio["int8"][16] >= 3
    assert ratio["float16"][128] == ratio["bfloat16"][16] == 2
    assert CODECS["int2"].param_bytes == 4


def test_cast_codecs_round_like_numpy_and_torch():
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((50, 20)) * 10.0 ** rng.integers(-9, 6, (50, 1))).astype(np.float32)
    small = x / np.abs(x).max() * 6e4  # inside float16's range
    y16, bad = roundtrip(CODECS["float16"], small)
    assert bad == 0
    np.testing.assert_array_equal(y16, small.astype(np.float16).astype(np.float32))
    assert roundtrip(CODECS["float16"], small * 2)[1] > 0  # overflow is flagged, not Inf
    ybf, _ = roundtrip(CODECS["bfloat16"], x)
    ref = torch.from_numpy(x).to(torch.bfloat16).to(torch.float32).numpy()
    np.testing.assert_array_equal(ybf, ref)
    y32, _ = roundtrip(CODECS["float32"], x.astype(np.float64))
    np.testing.assert_array_equal(y32, x)


@pytest.mark.parametrize("name", ["int2", "float16"])
def test_gather_and_scatter_add_fused(name):
    codec = CODECS[name]
    rng = np.random.default_rng(4)
    x = rng.standard_normal((40, 24)).astype(np.float32)
    idx = rng.integers(0, 40, 100)
    buf = np.empty((100, codec.row_bytes(24)), dtype=np.uint8)
    codec.encode(x, idx, buf, 5)
    plain = np.zeros((100, 24), dtype=np.float32)
    codec.decode(buf, plain, NO_INDEX, accumulate=False)
    added = np.ones((40, 24), dtype=np.float32)
    codec.decode(buf, added, idx, accumulate=True)
    ref = np.ones((40, 24), dtype=np.float32)
    np.add.at(ref, idx, plain)
    np.testing.assert_allclose(added, ref, rtol=1e-5, atol=1e-5)


def test_result_does_not_depend_on_threads():
    x = np.random.default_rng(5).standard_normal((500, 64)).astype(np.float32)
    set_threads(1)
    a = roundtrip(CODECS["int2"], x, key=9)[0]
    assert set_threads(3) == 3  # never clamped (see conftest)
    b = roundtrip(CODECS["int2"], x, key=9)[0]
    set_threads(1)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, roundtrip(CODECS["int2"], x, key=10)[0])


def test_unknown_codec():
    assert get_codec(None) is None and get_codec("none") is None
    with pytest.raises(SpmmgnnError, match="unknown codec"):
        get_codec("int3")


def _awkward_rows(dtype, f: int, rng) -> np.ndarray:
    """Rows at several scales with the codecs' special cases: zero, constant, sparse with
    zeros, a float64 constant that float32 cannot hold, a huge row, a near-constant row,
    and one Inf row (flagged, decodes to NaN)."""
    x = rng.standard_normal((24, f)) * rng.choice([1e-3, 1.0, 1e4], size=(24, 1))
    x[3], x[4], x[6] = 0.0, 1.5, -2.25
    x[5, 0] = np.inf
    x[7] = 1.0 + 1e-12
    x[8, ::2] = 0.0
    x[9] = 3e38
    x[10, 1:] = x[10, 0] + 1e-9
    return x.astype(dtype)


@pytest.mark.parametrize("kind", ["cpu", pytest.param("cuda", marks=[
    pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(),
                                        reason="needs a CUDA device")])])
@pytest.mark.parametrize("name", ["int8", "int4", "int2"])
def test_device_quantize_writes_the_cpu_codecs_bytes(name, kind, monkeypatch):
    """``torch_quantize`` (the integer codecs in torch, for device grids) packs the very
    bytes the numba codec packs, for float32 and float64 rows, widths not a multiple of the
    packing, several streams (keys), and its decode equals the numba decode bit for bit (on
    the CPU, and on a GPU where there is one)."""
    from spmmgnn.backend import torch_quantize

    codec, rng = get_codec(name), np.random.default_rng(7)
    dev = torch.device(kind)
    monkeypatch.setattr(torch_quantize, "CHUNK_ROWS", 7)  # rows in chunks, 24 = 7+7+7+3

    def enc(x, key):
        packed, bad = torch_quantize.encode(codec.bits, torch.from_numpy(x).to(dev), key)
        return packed.cpu(), bad

    for dtype in (np.float32, np.float64):
        for f in (1, 2, 3, 5, 7, 13, 64):
            x = _awkward_rows(dtype, f, rng)
            for key in (0, 1, 2**63 + 5, 0xFFFFFFFFFFFFFFFF):
                want = np.empty((x.shape[0], codec.row_bytes(f)), dtype=np.uint8)
                bad = codec.encode(x, NO_INDEX, want, key)
                got, got_bad = enc(x, key)
                assert got.dtype == torch.uint8 and (got_bad, bad) == (1, 1)
                np.testing.assert_array_equal(got.numpy(), want, err_msg=f"{dtype} {f} {key}")
                rows = np.zeros((x.shape[0], f), dtype=dtype)
                codec.decode(want, rows, NO_INDEX, accumulate=False)
                back = torch_quantize.decode(codec.bits, torch.from_numpy(want).to(dev), f,
                                              torch.from_numpy(rows).dtype).cpu()
                np.testing.assert_array_equal(back.numpy().view(np.uint8), rows.view(np.uint8))
            # a different stream rounds differently: the key reaches the random draws
            assert f < 5 or not torch.equal(enc(x, 2)[0], enc(x, 3)[0])
    empty, bad = enc(np.zeros((0, 5)), 1)
    assert empty.shape == (0, codec.row_bytes(5)) and bad == 0
    assert torch_quantize.decode(codec.bits, empty, 5, torch.float64).shape == (0, 5)


@pytest.mark.parametrize("name", ["bfloat16", "int8"])
def test_backends_code_the_first_rows_without_an_index(name):
    """Without an index a codec encodes the first rows of x, one per row of its output,
    and decodes into the first rows of out: the host codecs and the torch backend alike,
    also for none (a halo plan's reduce where no peer sends this rank a row)."""
    from spmmgnn.backend.host import HOST
    from spmmgnn.backend.torch_backend import TorchBackend

    codec, be = get_codec(name), TorchBackend(torch.device("cpu"))
    x = np.random.default_rng(3).standard_normal((6, 5))
    for m in (0, 4):
        want = np.empty((m, codec.row_bytes(5)), dtype=np.uint8)
        got = torch.empty(want.shape, dtype=torch.uint8)
        HOST.encode(codec, x, NO_INDEX, want, 7)
        be.encode(codec, torch.from_numpy(x), NO_INDEX, got, 7)
        np.testing.assert_array_equal(got.numpy(), want)
        for accumulate in (False, True):
            rows, out = np.ones((6, 5)), torch.ones(6, 5, dtype=torch.float64)
            HOST.decode(codec, want, rows, NO_INDEX, accumulate)
            be.decode(codec, got, out, NO_INDEX, accumulate)
            np.testing.assert_array_equal(out.numpy(), rows)
