"""Training on a device grid (``spmmgnn train --device``) with ``device="cpu"``: the same
functions that run on CUDA, equal to the numpy/numba trainer loss by loss, checkpoints
resumed across the two backends, the gradient all-reduce counted in the ``device_host`` tier,
the device-memory preflight, the refusals one error on every rank, and what the host alone
took before training on a device. The ``gpu`` twins run
the MPI cases on CUDA (P = 1, and P = 2 ranks sharing one GPU) and skip without one."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from spmmgnn.backend import fused
from spmmgnn.backend.dense_torch import dropout_mask as dropout_mask_torch
from spmmgnn.backend.dense_torch import relu_dropout as relu_dropout_torch
from spmmgnn.backend.dense_torch import vertex_dropout as vertex_dropout_torch
from spmmgnn.backend.host import HOST
from spmmgnn.backend.torch_backend import TorchBackend
from spmmgnn.local.hashing import splitmix64_torch
from spmmgnn.nn.dropout import dropout_mask, relu_dropout
from spmmgnn.training.optim import Adam

from ..mpi import one_line_error, run_cli

HAS_CUDA = torch.cuda.is_available()
RTOL = {"float32": 1e-5, "float64": 1e-12}
EPOCHS_RUN = 8  # (device_train.py's EPOCHS)


def relative(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    assert a.shape == b.shape and a.size
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(a), 1e-30)))


def check_training(got: dict, P: int) -> None:
    assert got["P"] == P and got["cases"]
    for case in got["cases"]:
        label = case["name"]
        assert "error" not in case, (label, case.get("error"))
        plain, dev = case["none"], case["on_device"]
        assert plain["device"] == "none" and dev["device"].startswith(got["device"]), label
        assert dev["params_on"] == [got["device"]], label  # parameters and buffer there
        assert len(dev["losses"]) == len(plain["losses"]) > 0, label
        rtol = RTOL[case.get("dtype", "float32")]
        assert relative(plain["losses"], dev["losses"]) <= rtol, (label, plain["losses"],
                                                                  dev["losses"])
        assert plain["device_host"] == 0, label
        if case["algorithm"] == "sparse1d":  # each exchanged row staged once, plus the
            # evaluation sums and, over more than one rank (a link over one stages
            # nothing), the flat gradient buffer each step and the parameters' broadcast
            extra = (dev["evaluations"] * 6 * 8 + (len(dev["losses"]) * dev["flat_bytes"]
                                                   + dev["param_bytes"] if P > 1 else 0))
            assert dev["device_host"] == dev["bytes_sent"] + extra, (label, dev)
    for key in ("device_then_none", "none_then_device", "dropout_resumed"):
        r = got[key]
        assert "error" not in r, (key, r.get("error"))
        assert r["rest_epochs"] == list(range(1, len(r["full"]) + 1)), key
        assert relative(r["full"], r["rest"]) <= 1e-5, (key, r["full"], r["rest"])
    check_dropout_repeat(got["dropout_repeat"], got["device"])


def check_dropout_repeat(runs: dict, device: str) -> None:
    """With dropout on, the same seed gives the device's losses again (bit for bit on the
    CPU; over torch.distributed to rounding), and other masks than the host's."""
    assert "error" not in runs, runs.get("error")
    assert len(runs["mpi"]) == EPOCHS_RUN and runs["host"] != runs["mpi"], runs
    if device == "cpu":
        assert runs["again"] == runs["mpi"], runs
    assert relative(runs["mpi"], runs["again"]) <= 1e-6, runs
    if "torch" in runs:
        assert relative(runs["mpi"], runs["torch"]) <= 1e-6, runs
    assert device != "cpu" or "torch" in runs


@pytest.mark.parametrize("P", [1, 2])
def test_device_cpu_training_equals_numpy_path(P, mpi_json):
    """GCN, 2 layers, dropout 0 (with and without the first-layer cache, a cast and an
    integer codec (quantized on the device: the same bits, only packed rows staged), float64
    oblivious1d, an empty block with label propagation) on a non-symmetric A with uneven
    blocks: device="cpu" equals device=None loss by loss (rtol 1e-5), and a checkpoint
    resumes on the other path with the uninterrupted run's losses. With dropout and input
    dropout on, the device's runs repeat their losses (over MPI and Gloo) and resume on
    the device with the uninterrupted run's."""
    check_training(mpi_json(P, "device_train.py", "cpu", timeout=900), P)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("P", [1, 2])
def test_cuda_training_equals_numpy_path(P, mpi_json):
    check_training(mpi_json(P, "device_train.py", "cuda", timeout=900), P)


# ------------------------------------------------------------------ in-process twins
IDS = np.array([0, 1, 5, 77, 2**31 + 9, 2**40 + 3, 2**62 + 17, 2**63 - 1], dtype=np.int64)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.93])
def test_torch_dropout_sites_share_the_fused_masks(p):
    """The torch backend's dropout (the fused pass, input dropout, the 3D model's mask)
    draws the masks of ``backend.fused``: the same seed the same masks, dropped entries 0,
    kept ones scaled by 1/(1-p); other draws than the host's splitmix64."""
    ids = torch.from_numpy(IDS)
    for seed, step, layer in [(0, 1, 1), (5, 17, 2), (2**40, 3, 0)]:
        keep = fused.keep_mask(ids, 33, p, seed, step, layer)
        for dtype in (torch.float32, torch.float64):
            got = dropout_mask_torch(ids, 33, p, seed, step, layer, dtype=dtype)
            want = keep.to(dtype) * (1.0 / (1.0 - p))
            assert torch.equal(got, want), (p, seed, step, layer)
    z = torch.randn(len(IDS), 33, generator=torch.Generator().manual_seed(1))
    z[0, 0], z[1, 1] = float("nan"), float("inf")
    bias = torch.randn(33, generator=torch.Generator().manual_seed(2))
    keep = fused.keep_mask(ids, 33, p, 3, 4, 1)
    scale = torch.tensor(1.0 / (1.0 - p), dtype=z.dtype)
    for b in (None, bias):
        h = torch.relu(z if b is None else z + b)
        want = torch.where(keep | torch.isnan(h), h * scale, torch.zeros(()))
        got = relu_dropout_torch(z, ids, p, 3, 4, 1, bias=b)
        assert torch.equal(want.nan_to_num(-1.0), got.nan_to_num(-1.0)), (p, b is None)
        again = relu_dropout_torch(z, ids, p, 3, 4, 1, bias=b)
        assert torch.equal(again.nan_to_num(-1.0), got.nan_to_num(-1.0))
    assert torch.equal(vertex_dropout_torch(z, ids, p, 3, 4, 0).nan_to_num(-1.0),
                       (z * dropout_mask_torch(ids, 33, p, 3, 4, 0)).nan_to_num(-1.0))
    host = dropout_mask(IDS, 33, p, 3, 4, 1)
    assert not np.array_equal(host != 0, keep.numpy())


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_cuda_dropout_masks_equal_the_cpu_torch_masks():
    """CUDA draws the masks the CPU torch backend draws (runs portable across devices)."""
    ids = torch.from_numpy(IDS)
    z = torch.randn(len(IDS), 33, generator=torch.Generator().manual_seed(1))
    for p in (0.1, 0.5, 0.93):
        want = dropout_mask_torch(ids, 33, p, 5, 17, 2)
        got = dropout_mask_torch(ids.to("cuda"), 33, p, 5, 17, 2)
        assert got.device.type == "cuda" and torch.equal(want, got.cpu()), p
        got = relu_dropout_torch(z.to("cuda"), ids.to("cuda"), p, 5, 17, 2)
        assert torch.equal(relu_dropout_torch(z, ids, p, 5, 17, 2), got.cpu()), p


def test_splitmix64_torch_equals_python():
    """splitmix64 of one word is ``hashing.mix64`` of it (the Python twin of the kernels')."""
    from spmmgnn.local.hashing import mix64

    words = np.array([0, 1, 7, 2**63 - 1, -1, -2**63, 12345678901234567], dtype=np.int64)
    got = splitmix64_torch(torch.from_numpy(words)).numpy().view(np.uint64)
    assert [int(v) for v in got] == [mix64(int(w) & (2**64 - 1)) for w in words]


@pytest.mark.parametrize("p", [0.0, 0.4])
def test_relu_dropout_gradient(p):
    """The fused pass's gradients: the host's without dropout (the same function), the
    plain-torch reference ``relu(z + b) * mask`` with it."""
    z1 = torch.randn(50, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    z2 = z1.clone()
    b1 = torch.randn(7, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    b2 = b1.clone()
    for t in (z1, z2, b1, b2):
        t.requires_grad_(True)
    ids = np.arange(100, 150, dtype=np.int64)
    g = torch.randn(50, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    if p == 0:
        (relu_dropout(z1, ids, p, 1, 2, 1, bias=b1) * g).sum().backward()
    else:
        mask = dropout_mask_torch(torch.from_numpy(ids), 7, p, 1, 2, 1, dtype=torch.float64)
        (torch.relu(z1 + b1) * mask * g).sum().backward()
    (relu_dropout_torch(z2, torch.from_numpy(ids), p, 1, 2, 1, bias=b2) * g).sum().backward()
    assert torch.equal(z1.grad, z2.grad)
    assert torch.allclose(b1.grad, b2.grad, rtol=1e-12, atol=0)


@pytest.mark.parametrize("dtype, rtol", [(torch.float32, 1e-6), (torch.float64, 1e-14)])
def test_adam_tensor_path_equals_fused(dtype, rtol):
    """Adam on the torch backend (torch's tensor operations, on device="cpu") equals the
    host backend's fused numba pass to rounding over steps, weight decay on."""
    gen = torch.Generator().manual_seed(0)
    start = [torch.randn(13, 5, generator=gen, dtype=dtype), torch.randn(5, generator=gen,
                                                                          dtype=dtype)]
    runs = []
    for backend in (HOST, TorchBackend(torch.device("cpu"))):
        params = [torch.nn.Parameter(t.clone()) for t in start]
        opt = Adam(params, lr=0.01, weight_decay=5e-4, backend=backend)
        g = torch.Generator().manual_seed(1)
        for _ in range(25):
            for p in params:
                p.grad = torch.randn(p.shape, generator=g, dtype=dtype)
            opt.step()
        runs.append(params)
    for a, b in zip(*runs, strict=True):
        assert torch.allclose(a, b, rtol=rtol, atol=rtol * 1e-2)


# ------------------------------------------------------------------ the CLI's refusals
SMALL = ("--csbm-n", "300", "--csbm-features", "8", "--hidden", "8", "--epochs", "2",
         "--quiet")


def test_preflight_refuses_what_the_device_cannot_hold(tmp_path):
    """SPMMGNN_DEVICE_MEMORY pretends the device's free memory: 1 KB is one clear error on
    every rank before any epoch runs (CI tests on device="cpu" what CUDA's free memory
    decides on a GPU)."""
    proc = run_cli(2, "train", *SMALL, "--device", "cpu",
                   env=dict(SPMMGNN_DEVICE_MEMORY="1000"))
    one_line_error(proc, "training on cpu needs about", "device memory",
                   "operator blocks", "train without --device")
    assert "epoch" not in proc.stdout
    proc = run_cli(1, "train", *SMALL, "--device", "cpu",
                   env=dict(SPMMGNN_DEVICE_MEMORY="lots"))
    one_line_error(proc, "$SPMMGNN_DEVICE_MEMORY must be a number of bytes >= 0, got 'lots'")
    out = tmp_path / "run.json"
    ok = run_cli(1, "train", *SMALL, "--device", "cpu", "--json", str(out),
                 env=dict(SPMMGNN_DEVICE_MEMORY=str(10**9)))
    assert ok.returncode == 0, ok.stderr[-3000:]
    assert json.loads(out.read_text())["device"] == "cpu"


@pytest.mark.parametrize("flags, words", [
    (("--device", "tpu"), ("--device must be cpu, cuda or cuda:k",)),
    (("--exchange", "node", "--transport", "torch"),
     ("exchange='node' moves rows through MPI's shared-memory windows", "transport='mpi'")),
])
def test_unsupported_options_are_refused_before_set_up(flags, words):
    args = ["train", *SMALL, "--device", "cpu", *flags]
    proc = run_cli(2, *args)
    one_line_error(proc, *words)


@pytest.mark.parametrize("flags", [
    ("--exchange", "node"),
    pytest.param(("--algorithm", "sparse2d"), marks=pytest.mark.skip(reason="ported in p1")),
    pytest.param(("--algorithm", "featureparallel"),
                 marks=pytest.mark.skip(reason="ported in p1")),
    pytest.param(("--staleness", "2"),
                 marks=pytest.mark.skip(reason="the delayed views' port to the backend")),
])
def test_options_the_host_alone_took_train_on_a_device(flags, tmp_path):
    """What a device grid refused before (the node-aware exchange over MPI, every family,
    the delayed views) trains there: the trainer has no device conditions of its own."""
    out = tmp_path / "run.json"
    proc = run_cli(2, "train", *SMALL, "--device", "cpu", *flags, "--json", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(out.read_text())
    assert got["device"] == "cpu" and got["epochs_run"] == 2 and got["transport"] == "mpi"


def test_bench_train_mode_on_a_device(tmp_path):
    """``spmmgnn bench --mode train --device cpu --transport torch`` runs the trainer on the
    device grid over Gloo and records the device and transport in the run; the spmm mode
    with --device is one clear error."""
    out = tmp_path / "bench.jsonl"
    proc = run_cli(2, "bench", "--graph", "csbm:n=300,avg_degree=6", "--mode", "train",
                   "--algorithm", "sparse1d", "--features", "8", "--epochs", "2",
                   "--device", "cpu", "--transport", "torch", "--quiet", "-o", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    (rec,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert "error" not in rec and rec["device"] == "cpu" and rec["epochs_run"] == 2, rec
    assert rec["transport"] == "torch", rec
    proc = run_cli(1, "bench", "--graph", "csbm:n=300", "--mode", "spmm", "--device", "cpu",
                   "-o", str(tmp_path / "no.jsonl"))
    one_line_error(proc, "--device runs the train mode")
