"""The device path (``ProcessGrid(device=...)``, issue 44) run with ``device="cpu"``: the same
functions that run on CUDA, equal to scipy and to the numpy/numba path, the bytes counted
alike, and wrong-device input one error on every rank. The ``gpu`` tests repeat the MPI cases
on CUDA (P = 1, and P = 2 ranks sharing one GPU) and are skipped without one."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from spmmgnn import ALGORITHMS, DistSpMM, ProcessGrid, SpmmgnnError
from spmmgnn.backend.device import device_error

TOL = {"float32": 1e-5, "float64": 1e-12}
FAMILIES = ("oblivious1d", "oblivious15d", "prepost1d", "sparse1d", "sparse15d")  # device_cases
HAS_CUDA = torch.cuda.is_available()


def check_cases(got: dict, P: int) -> None:
    rows = got["cases"]
    assert rows and {r["algorithm"] for r in rows} == set(FAMILIES)
    assert {r["exchange"] for r in rows} == {"flat", "node", "auto"}
    assert any(r["codec"] for r in rows) and any(r["c"] == 2 for r in rows) == (P % 2 == 0)
    for r in rows:
        label = f"{r['algorithm']} c={r['c']} {r['case']} {r['codec']} {r['dtype']} f={r['f']}"
        tol = TOL[r["dtype"]]
        if r["codec"] is None:  # exact products: scipy's numbers
            assert r["err"] <= tol and r["err_t"] <= tol, (label, r["err"], r["err_t"])
        # codecs round on the wire alike on both paths: the numpy path's numbers (where
        # auto ran other plans, a codec rounds at other legs: scipy's numbers above only)
        if r["same_choices"] or r["codec"] is None:
            assert r["err_np"] <= tol and r["err_np_t"] <= tol, (label, r["err_np"],
                                                                 r["err_np_t"])
        # auto prices the device path's copying node plan, not the numpy path's in-place
        # one (docs/gpu.md): its bytes are the numpy path's where it picks the same plans
        assert r["same_bytes"] or (r["exchange"] == "auto" and not r["same_choices"]), label
        assert r["same_choices"] or r["exchange"] == "auto", label
        for st in r["ranks"]:
            assert st["numpy_device_host"] == 0, label
            if r["exchange"] != "flat":  # the plan's verbs on host copies: numbers only
                continue
            if not r["algorithm"].startswith("oblivious"):  # each (packed) row sent staged
                # once, each received in once: every codec encodes and decodes on the device
                assert st["device_host_sent"] == st["bytes_sent"] + st["allreduce_bytes"]
                assert st["device_host_received"] == (st["bytes_received"]
                                                      + st["allreduce_bytes"]), label
            else:  # a stage's block is staged once however many peers it goes to (a reduce's
                # root stages its own part too, which it receives into: no bytes sent)
                assert st["device_host_sent"] <= (st["bytes_sent"] + st["bytes_received"]
                                                  + st["allreduce_bytes"]), label
                assert st["device_host_received"] <= (st["bytes_received"]
                                                      + st["allreduce_bytes"]), label
                assert (st["device_host_sent"] > 0) == (st["bytes_sent"] > 0
                                                        or st["allreduce_bytes"] > 0), label


def check_errors(got: dict, P: int) -> None:
    per_rank = got["errors"]
    assert len(per_rank) == P
    for name, first in per_rank[0].items():
        if name == "dot_after":
            continue
        assert first is not None and first[1], (name, first)  # refused, collectively
        assert all(r[name] == first for r in per_rank), name  # the same message on all
    words = dict(numpy_everywhere="pass a torch tensor on", numpy_on_rank_1="got a ndarray",
                 meta_on_last="meta tensor", nan_on_rank_0="NaN",
                 scatter_numpy="scatter_rows",
                 gather_numpy="gather_rows", dot_numpy="dot:")
    for name, word in words.items():
        assert word in per_rank[0][name][0], (name, per_rank[0][name])
    kinds = {r["dot_after"][1].split(":")[0] for r in per_rank}  # cuda:k: one GPU a rank
    assert kinds == {per_rank[0]["dot_after"][1].split(":")[0]}


@pytest.mark.parametrize("P", [1, 2, pytest.param(3, marks=pytest.mark.slow),
                               pytest.param(4, marks=pytest.mark.slow)])
def test_device_cpu_equals_scipy_and_numpy_path(P, mpi_json):
    got = mpi_json(P, "device_cases.py", "cpu")
    check_cases(got, P)
    check_errors(got, P)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("P", [1, 2])
def test_device_cuda_equals_scipy_and_numpy_path(P, mpi_json):
    got = mpi_json(P, "device_cases.py", "cuda")
    check_cases(got, P)
    check_errors(got, P)
    assert per_device(got) == "cuda:0"


def per_device(got: dict) -> str:
    return got["errors"][0]["dot_after"][1]


# ------------------------------------------------------------------ in-process (P = 1)
def small():
    A = sp.random(23, 23, density=0.2, format="csr", random_state=4)
    return A, np.random.default_rng(0).standard_normal((23, 3))


def test_device_none_refuses_data_on_another_device():
    """device=None never returns a tensor from another device on the CPU (issue 44's bug):
    the rule refuses every non-CPU tensor; meta is the non-CPU device a CPU build has."""
    A, X = small()
    op = DistSpMM.from_scipy(A, ProcessGrid())
    meta = torch.empty(23, 3, dtype=torch.float64, device="meta")
    for call in (op.matmul, op.matmul_t, op.gather_rows, op.scatter_rows, op.norm):
        with pytest.raises(SpmmgnnError, match="meta tensor"):
            call(meta)
    assert device_error(meta, None, "matmul") is not None
    assert device_error(torch.ones(2), None, "matmul") is None
    assert device_error(np.ones(2), None, "matmul") is None
    assert "meta" in device_error(meta, torch.device("cpu"), "matmul")
    y = op.matmul(torch.from_numpy(X))
    assert y.device.type == "cpu" and np.allclose(y.numpy(), A @ X)


@pytest.mark.parametrize("spec, word", [("tpu", "device must be None, 'cpu', 'cuda'"),
                                        ("cuda:x", "device must be None"),
                                        ("cpu:1", "device must be None")])
def test_bad_device_is_one_error(spec, word):
    with pytest.raises(SpmmgnnError, match=word):
        ProcessGrid(device=spec)


@pytest.mark.skipif(HAS_CUDA, reason="checks the refusal where no CUDA device is visible")
def test_cuda_without_a_gpu_is_one_error():
    with pytest.raises(SpmmgnnError, match="no CUDA device is visible"):
        ProcessGrid(device="cuda")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_device_cpu_vector_linalg_and_stats(dtype):
    A, X = small()
    grid = ProcessGrid(device="cpu")
    assert grid.device == torch.device("cpu")
    op = DistSpMM.from_scipy(A, grid)
    x = torch.from_numpy(X).to(dtype)
    v = op.matmul(x[:, 0])
    assert v.shape == (23,) and v.dtype == dtype
    tol = TOL[str(dtype).removeprefix("torch.")]
    assert np.allclose(v.numpy(), A @ X[:, 0], rtol=tol, atol=tol)
    assert np.allclose(op.norm(x).numpy(), np.linalg.norm(X, axis=0), rtol=tol)
    q, r = op.qr(x)
    assert isinstance(q, torch.Tensor) and np.allclose((q @ r).numpy(), X, atol=1e-4)
    stats = op.comm_stats()
    tiers, tiers_in = stats["bytes_sent_by_tier"], stats["bytes_received_by_tier"]
    # matmul stages nothing at P = 1; norm's f float64 sums and qr's two f x f Gram matrices
    # go to the host, the norms, the two Cholesky factors and R come back: all counted
    f, itemsize = X.shape[1], x.element_size()
    assert set(tiers) == {"intra", "inter", "device_host"}
    assert tiers["device_host"] == 8 * f + 2 * 8 * f * f
    assert tiers_in["device_host"] == itemsize * f + 2 * 8 * f * f + itemsize * f * f
    assert DistSpMM.from_scipy(A).comm_stats()["bytes_received_by_tier"]["device_host"] == 0
    with pytest.raises(SpmmgnnError, match="requires grad"):
        op.matmul(x.clone().requires_grad_())
    assert op.probe_symmetry() is False
    sym = DistSpMM.from_scipy(A + A.T, grid)
    assert sym.probe_symmetry() is True
    from spmmgnn.algorithms.delayed import DelayedRemote

    view = DelayedRemote(op, staleness=2).views(1)[0]  # P = 1: no ghost rows, exact
    got = view.matmul(x)
    assert got.dtype == dtype and np.allclose(got.numpy(), A @ X, rtol=tol, atol=tol)


def test_every_algorithm_runs_on_a_device_grid():
    """Every algorithm builds on a device grid and multiplies there (A and A^T, tensors of
    the grid's device out): one backend per grid, no family refused."""
    A, X = small()
    shapes = {"1d": None, "1.5d": None, "2d": (1, 1), "3d": (1, 1, 1)}
    for name, cls in ALGORITHMS.items():
        grid = ProcessGrid(shape=shapes[cls.grid_kinds[0]], device="cpu")
        op = DistSpMM.from_scipy(A, grid, algorithm=name)
        x = op.scatter_rows(torch.from_numpy(X))
        z, t = op.matmul(x), op.matmul_t(op.scatter_rows(torch.from_numpy(X), side="output"))
        assert z.device == t.device == grid.device, name
        assert np.allclose(op.gather_rows(z).numpy(), A @ X), name
        assert np.allclose(op.gather_rows(t, side="input").numpy(), A.T @ X), name


@pytest.mark.slow
@pytest.mark.mpi
def test_bench_gpu_dry_run(tmp_path):
    """``python -m bench.gpu --device cpu --quick`` runs end to end: spmmgnn's trainer (the
    fused dropout pass) and tuned torch with the CLI's default model on two graphs, with
    their peaks and the model's prediction; the extras' P = 2 losses equal P = 1's and,
    with dropout 0, the device path's the numpy path's."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    out = tmp_path / "gpu.json"
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-m", "bench.gpu", "--device", "cpu", "--quick",
                           "--sizes", "3000", "--search-seconds", "0", "--out",
                           str(out)], capture_output=True, text=True, timeout=1500, cwd=root)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    check_bench_gpu(json.loads(out.read_text()), out.with_suffix(".md").read_text())


def check_bench_gpu(got: dict, text: str) -> None:
    for n in got["sizes"]:
        runs = got["graphs"][str(n)]
        for key in ("uncached", "cached"):
            run = runs["spmmgnn"][key]
            assert run["peak_bytes"] > 0 and run["predicted_bytes"] > 0, key
            assert run["dropout_impl"] == "torch", key  # the fused pass's CPU twin
        assert runs["tuned_torch"]["uncached"]["peak_bytes"] > 0
    checks = got["extras"]["checks"]
    for key in ("P = 2 vs P = 1 losses, max relative difference",
                "device vs numpy path losses, dropout 0, P = 1",
                "device vs numpy path losses, dropout 0, P = 2"):
        assert checks[key] <= 1e-5, (key, checks[key])
    assert set(got["extras"]["local_product"]) == {"f=16", "f=128"}
    assert "| spmmgnn train --device |" in text and "tuned torch" in text


def test_spmm_command_on_a_device_grid(tmp_path):
    """``spmmgnn spmm --device cpu`` checks its product against scipy (the command fails
    otherwise), featureparallel included (every family runs on a device grid); a device
    that does not exist is one error line."""
    import json

    from ..mpi import one_line_error, run_cli

    out = tmp_path / "spmm.json"
    proc = run_cli(2, "spmm", "--scale", "8", "--algorithm", "sparse1d", "sparse15d",
                   "featureparallel", "--device", "cpu", "--repeat", "2", "--json", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(out.read_text())
    assert [r["device"] for r in rows] == ["cpu"] * 3
    assert [r["algorithm"] for r in rows] == ["sparse1d", "sparse15d", "featureparallel"]
    assert all(r["max_rel_error"] <= 1e-5 and r["max_bytes_sent_per_spmm"] > 0 for r in rows)
    one_line_error(run_cli(2, "spmm", "--scale", "8", "--algorithm", "sparse1d",
                           "--device", "tpu"), "tpu")


def test_device_link_presets_price_the_staged_bytes():
    """The host <-> device leg of the model: each preset has its source, faster links cost
    less for the same bytes, and an unknown name is refused naming the choices."""
    from spmmgnn.exchange.tiers import DEVICE_LINKS, device_host_seconds, device_link

    assert {"pcie5", "pcie4", "nvlink-c2c"} <= set(DEVICE_LINKS)
    nbytes = 2 * 1_000_000 * 128 * 4  # one 1M x 128 float32 block, out and back
    seconds = {k: float(device_host_seconds(device_link(k), 2, nbytes)) for k in DEVICE_LINKS}
    assert seconds["nvlink-c2c"] < seconds["pcie5"] < seconds["pcie4"]
    assert abs(seconds["pcie5"] - (2 * 10e-6 + nbytes / 50e9)) < 1e-12
    assert all("GB/s" in link.source for link in DEVICE_LINKS.values())
    with pytest.raises(ValueError, match="pcie5"):
        device_link("pcie6")


def test_nonfinite_checks_agree_with_isfinite():
    """The torch backend's input check (the sum first, the elementwise test only when the
    sum is not finite) on CPU tensors, overflowing finite values included, equals the
    elementwise test and the host backend's one-pass kernel."""
    from spmmgnn.backend.host import HOST
    from spmmgnn.backend.torch_backend import TorchBackend

    torch_backend = TorchBackend(torch.device("cpu"))
    big = torch.full((4, 3), 3e38, dtype=torch.float32)  # finite; its sum overflows
    cases = [torch.zeros(0, 2), torch.ones(5, 2, dtype=torch.float64), big]
    for bad in (float("nan"), float("inf"), -float("inf")):
        x = torch.ones(6, 3)
        x[4, 1] = bad
        cases.append(x)
    for x in cases:
        want = not bool(torch.isfinite(x).all())
        assert bool(torch_backend.count_nonfinite(x)) == want, x
        assert bool(HOST.count_nonfinite(x.numpy())) == want, x


def test_staged_copies_count_their_bytes():
    """``to_host`` / ``to_device`` count what they stage as the device_host tier; an empty
    block on a device is not copied (meta stands for a device a CPU build has)."""
    from spmmgnn.backend.device import to_device, to_host
    from spmmgnn.runtime.stats import CommStats

    stats = CommStats()
    t = torch.ones(3, 4, dtype=torch.float64)
    a = to_host(t, stats)
    assert a.shape == (3, 4) and stats.bytes_device_to_host == 96
    back = to_device(a, torch.device("cpu"), stats)
    assert torch.equal(back, t) and stats.bytes_host_to_device == 96
    empty = to_device(np.zeros((0, 4), np.float32), torch.device("meta"), stats)
    assert empty.device.type == "meta" and tuple(empty.shape) == (0, 4)
    assert to_host(torch.empty(0, 2, device="meta"), stats).shape == (0, 2)
    assert stats.as_dict()["bytes_sent_by_tier"]["device_host"] == 96


@pytest.mark.parametrize("algorithm", ["sparse1d", "oblivious1d"])
@pytest.mark.parametrize("validate", [True, False])
def test_device_cpu_rectangular(algorithm, validate):
    """A rectangular A (its two sides have different row counts) on a device grid, with and
    without the input check."""
    A = sp.random(17, 29, density=0.2, format="csr", random_state=5)
    op = DistSpMM.from_scipy(A, ProcessGrid(device="cpu"), algorithm=algorithm,
                             validate=validate)
    x = torch.from_numpy(np.random.default_rng(1).standard_normal((29, 4)))
    y = torch.from_numpy(np.random.default_rng(2).standard_normal((17, 4)))
    assert np.allclose(op.matmul(op.scatter_rows(x)).numpy(), A @ x.numpy())
    got = op.matmul_t(op.scatter_rows(y, side="output"))
    assert np.allclose(op.gather_rows(got, side="input").numpy(), A.T @ y.numpy())
    with pytest.raises(SpmmgnnError, match="pass a torch tensor"):
        op.matmul(x.numpy())
    square = DistSpMM.from_scipy(A[:, :17] + A[:, :17].T, ProcessGrid(device="cpu"),
                                 algorithm=algorithm, validate=validate)
    assert square.probe_symmetry() is True
    got = square.matmul_t(square.scatter_rows(y))  # its transposes freed: built again
    assert np.allclose(got.numpy(), (A[:, :17] + A[:, :17].T) @ y.numpy())


def device_leg_runs(got: dict) -> set:
    """Every run of ``device_volumes.py`` against the model, rank by rank: the device_host
    bytes ``comm_stats()`` counted equal ``benchmark.device_volumes``'s, both ways, forward
    and transpose, over MPI and over torch.distributed (nothing staged); returns the
    (algorithm, c, codec, transport) seen."""
    from spmmgnn.benchmark.device_memory import device_blocks
    from spmmgnn.benchmark.device_volumes import device_host_volumes
    from spmmgnn.benchmark.volumes import Layout, predict

    P, seen = got["P"], set()
    for run in got["runs"]:
        case = got["cases"][run["case"]]
        n = case["n"]
        A = sp.csr_array((np.ones(len(case["rows"])), (case["rows"], case["cols"])),
                         shape=(n, n))
        layout = Layout.build(A, case["parts"], P // run["c"])
        args = (run["algorithm"], layout)
        vol = predict(*args, P, run["c"], run["f"], run["itemsize"], run["codec"])
        leg = device_host_volumes(*args, vol, P, run["c"], run["f"], run["itemsize"],
                                  run["codec"], run["transport"])
        for key in ("to_host", "to_device", "to_host_t", "to_device_t"):
            measured = [r[key] for r in run["ranks"]]
            assert getattr(leg, key).tolist() == measured, (run["case"], run["algorithm"],
                                                            run["c"], run["codec"], key)
        for key, transposes in (("blocks", False), ("blocks_t", True)):  # device memory
            if run["algorithm"] == "prepost1d":  # M_recv, M_send: estimated
                continue
            held = device_blocks(*args, P, run["c"], run["itemsize"], transposes)
            assert held.tolist() == [r[key] for r in run["ranks"]], (
                run["case"], run["algorithm"], run["c"], key)
        seen.add((run["algorithm"], run["c"], run["codec"], run["transport"]))
    return seen


@pytest.mark.parametrize("P", [2, pytest.param(3, marks=pytest.mark.slow)])
def test_model_device_host_bytes_equal_comm_stats(P, mpi_json):
    """``spmmgnn model --device-link``'s host <-> device bytes are exact: on a device="cpu"
    grid, per rank, what ``comm_stats()`` counts as the device_host tier (uneven and empty
    blocks, hub rows, codecs, c = 1 and c = P); and ``--device-memory``'s blocks are the
    bytes of the operator's device tensors after a matmul and after a matmul_t."""
    from spmmgnn.benchmark.device_volumes import device_leg_modelled

    seen = device_leg_runs(mpi_json(P, "device_volumes.py", "cpu"))
    assert {a for a, *_ in seen} == set(FAMILIES) == {a for a in ALGORITHMS
                                                     if device_leg_modelled(a)}
    assert ("sparse15d", P, None, "mpi") in seen and ("oblivious15d", P, None, "mpi") in seen
    assert ("sparse1d", 1, "int8", "mpi") in seen and ("sparse1d", 1, "bfloat16", "mpi") in seen
    assert {(a, c) for a, c, _, t in seen if t == "torch"} >= {
        ("sparse1d", 1), ("oblivious1d", 1), ("sparse15d", P), ("oblivious15d", P)}


def test_device_leg_not_modelled_says_so():
    """The 2D and 3D families, plexus3d and featureparallel run on a device grid, but the
    model does not project them onto GPUs: None, not a guess."""
    from spmmgnn.benchmark.device_volumes import device_host_volumes, device_leg_modelled
    from spmmgnn.benchmark.volumes import Layout, predict

    A, _ = small()
    layout = Layout.build(sp.csr_array(A), None, 1)
    for name in ALGORITHMS:
        if name in FAMILIES:
            continue
        assert not device_leg_modelled(name), name
        vol = predict("sparse1d", layout, 1, 1, 4, 4)
        assert device_host_volumes(name, layout, vol, 1, 1, 4) is None, name


def test_model_projects_gpus_with_the_device_leg(tmp_path, capsys):
    """``spmmgnn model --device-link``: next to the CPU rows, the device families on GPUs
    with their host <-> device bytes and seconds (a faster link costs less); the other
    algorithms are not projected there; --device-rate needs a link."""
    import json

    from spmmgnn.cli import main

    rows = {}
    for link in ("pcie4", "nvlink-c2c"):
        out = tmp_path / f"{link}.json"
        assert main(["model", "random:n=400,avg_degree=8", "--P", "1", "4", "--c", "1", "2",
                     "--alpha", "1e-6", "--beta", "1e-10", "--rate", "1e9", "--device-link",
                     link, "--json", str(out)]) == 0
        got = json.loads(out.read_text())
        assert got["device_link"] == link and got["device_rate"] == 7.9e11
        rows[link] = {(r["P"], r["c"], r["algorithm"]): r for r in got["predictions"]
                      if r.get("device_link") == link}
        assert {a for _, _, a in rows[link]} == set(FAMILIES)
        cpu = [r for r in got["predictions"] if "device_link" not in r]
        assert {r["algorithm"] for r in cpu} > set(FAMILIES)
        for (P, _, _), r in rows[link].items():
            assert (r["max_device_host_bytes"] > 0) == (P > 1), r
            assert r["seconds"] >= r["local"] + r["device_host"]
    for key, slow in rows["pcie4"].items():
        fast = rows["nvlink-c2c"][key]
        assert fast["max_device_host_bytes"] == slow["max_device_host_bytes"]
        assert fast["device_host"] <= slow["device_host"]
        assert fast["device_host"] < slow["device_host"] or key[0] == 1
    capsys.readouterr()
    assert main(["model", "random:n=50", "--alpha", "1e-6", "--beta", "1e-10", "--device-rate",
                 "1e12"]) == 2
    assert "--device-rate is the local rate of --device-link" in capsys.readouterr().err


def test_model_memory_says_what_fits_a_device(tmp_path, capsys):
    """``spmmgnn model --memory --device-memory GiB``: per (P, c, algorithm) that runs on a
    device grid, the largest rank's device bytes by part and whether every rank fits; a
    device too small for P = 1 fits at P = 4, and the verdict names the ranks that do not
    fit and what they need. --device-memory without --memory, or with a codec, is refused."""
    import json

    from spmmgnn.benchmark.device_memory import GIB
    from spmmgnn.cli import main

    out = tmp_path / "memory.json"
    gib = 0.03
    assert main(["model", "csbm:n=20000", "--memory", "--P", "1", "4", "--c", "1", "-f",
                 "128", "--device-memory", str(gib), "--algorithm", "sparse1d",
                 "oblivious1d", "featureparallel", "--json", str(out)]) == 0
    got = json.loads(out.read_text())
    rows = {(r["P"], r["algorithm"]): r for r in got["device"]}
    assert set(rows) == {(P, a) for P in (1, 4) for a in ("sparse1d", "oblivious1d")}
    for (P, _), r in rows.items():
        parts = r["device_blocks"] + r["device_exchange"] + r["device_training"]
        assert r["device_total"] == parts and r["device_blocks"] > 0
        assert r["fits"] == (P == 4) == (r["device_total"] <= gib * GIB), r
        if not r["fits"]:
            assert r["verdict"].startswith("does not fit on rank(s) 0: rank 0 needs")
    assert "does not fit on rank(s) 0" in capsys.readouterr().out
    assert main(["model", "random:n=50,avg_degree=4", "--P", "2", "--device-memory",
                 "1", "--alpha", "1e-6", "--beta", "1e-9"]) == 2
    assert "--device-memory says what fits a GPU" in capsys.readouterr().err
    assert main(["model", "random:n=50,avg_degree=4", "--memory", "--P", "2", "--codec",
                 "int8", "--device-memory", "1"]) == 2
    assert "drop --codec" in capsys.readouterr().err


def test_cuda_aware_setting(monkeypatch):
    """``SPMMGNN_CUDA_AWARE_MPI``: auto asks the MPI library (this CI's MPICH has no CUDA:
    off) and is off off CUDA; 1 passes tensors directly, also a CPU grid's; 0 stages; any
    other value is one clear error. The library's answer is a bool where it can tell."""
    from mpi4py import MPI

    from spmmgnn.backend.staging import SETTING, cuda_aware, mpi_cuda_support

    cpu = torch.device("cpu")
    assert mpi_cuda_support() in (True, False, None)
    for value, want in (("auto", False), ("", False), ("0", False), ("1", True)):
        monkeypatch.setenv(SETTING, value)
        assert cuda_aware(MPI.COMM_WORLD, cpu) is want, value
        assert cuda_aware(MPI.COMM_WORLD, None) is False
    monkeypatch.setenv(SETTING, "yes")
    with pytest.raises(SpmmgnnError, match="use auto, 0 or 1"):
        cuda_aware(MPI.COMM_WORLD, cpu)


def test_device_cpu_direct_mpi_equals_staged(tmp_path):
    """``SPMMGNN_CUDA_AWARE_MPI=1`` on a device="cpu" grid runs the CUDA-aware path (MPI
    reads and writes the tensors themselves): the same products and rank-to-rank bytes as
    staged, and the halo exchanges (every codec's packed rows included) and broadcasts stage
    nothing (the 1.5D all-reduce, the oblivious transposes' reduce and the node-aware exchange
    still do)."""
    from ..mpi import run_mpi_json

    got = run_mpi_json(2, "device_cases.py", tmp_path, "cpu",
                       env={"SPMMGNN_CUDA_AWARE_MPI": "1"})
    check_errors(got, 2)
    for r in got["cases"]:
        label = f"{r['algorithm']} c={r['c']} {r['case']} {r['codec']} {r['dtype']} f={r['f']}"
        tol = TOL[r["dtype"]]
        if r["same_choices"] or r["codec"] is None:  # else a codec rounds at other legs
            assert r["err_np"] <= tol and r["err_np_t"] <= tol, label
        assert r["same_bytes"] or (r["exchange"] == "auto" and not r["same_choices"]), label
        for st in r["ranks"]:
            if r["exchange"] != "flat":  # the node-aware plan runs on host copies
                continue
            if not r["algorithm"].startswith("oblivious"):  # packed rows too go direct
                assert st["device_host_sent"] == st["allreduce_bytes"], label
                assert st["device_host_received"] == st["allreduce_bytes"], label
            else:  # the broadcasts go direct: only the transposes' reduce is staged
                assert st["device_host_received"] <= st["allreduce_bytes"] + st[
                    "bytes_received"], label


@pytest.mark.parametrize("kind", ["cpu", pytest.param("cuda", marks=[
    pytest.mark.gpu, pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")])])
def test_staging_round_trip(kind):
    """``Staging``: rows out to a host buffer (pinned on CUDA, allocated once per name and
    reused while large enough) and back onto the device, equal and counted as the
    device_host tier; on the CPU the tensor's own memory, no copy; direct: the tensors
    themselves, nothing counted."""
    from spmmgnn.backend.staging import Staging
    from spmmgnn.runtime.stats import CommStats

    device, stats = torch.device(kind), CommStats()
    if kind == "cuda":  # a grid's device names its index (cuda:0), as tensors' do
        device = torch.device("cuda", torch.cuda.current_device())
    st = Staging(device, direct=False)
    t = torch.randn(5, 3, dtype=torch.float64, device=device)
    host = st.out(t, stats, "rows")
    st.ready(host)
    assert isinstance(host, np.ndarray) and np.array_equal(host, t.cpu().numpy())
    assert stats.bytes_device_to_host == 120
    back = torch.zeros(4, 3, dtype=torch.float64, device=device)
    landing = st.recv(back, "in")
    landing[...] = host[:4]
    st.landed(landing, back, stats)
    if kind == "cuda":
        torch.cuda.synchronize(device)
    assert back.device == device and torch.equal(back, t[:4])
    assert stats.bytes_host_to_device == 96
    if kind == "cuda":
        first = st.pinned["rows"]
        assert first.is_pinned() and st.pinned["in_recv"].is_pinned()
        st.ready(st.out(t[:2], stats, "rows"))
        assert st.pinned["rows"] is first  # reused, not allocated again
    else:
        assert np.shares_memory(host, t.numpy()) and np.shares_memory(landing, back.numpy())
    direct, counted = Staging(device, direct=True), CommStats()
    assert direct.out(t, counted, "rows") is t and direct.recv(back, "in") is back
    direct.landed(back, back, counted)
    assert counted.bytes_device_to_host == counted.bytes_host_to_device == 0
