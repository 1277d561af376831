"""Start-up: the numpy-only API and the command line do not import torch."""

from __future__ import annotations

import subprocess
import sys

from ..mpi import run_mpi

NO_TORCH = """
import sys
import numpy as np, scipy.sparse as sp
import spmmgnn
from spmmgnn.cli import build_parser
build_parser()
A = sp.random(40, 40, density=0.2, random_state=0, format="csr")
op = spmmgnn.DistSpMM.from_scipy(A, algorithm="sparse1d")
X = np.random.default_rng(0).standard_normal((40, 3))
y = op.gather_rows(op.matmul(op.scatter_rows(X)))
if op.grid.rank == 0:
    assert np.allclose(y, A @ X)
    assert "torch" not in sys.modules, "torch was imported"
    print("ok")
"""


def test_numpy_api_and_parser_leave_torch_out(tmp_path):
    proc = subprocess.run([sys.executable, "-c", NO_TORCH], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
    script = tmp_path / "no_torch.py"
    script.write_text(NO_TORCH)
    assert run_mpi(2, str(script)).stdout.strip() == "ok"


def test_parser_model_names_are_the_models():
    from spmmgnn.commands.train import MODELS as PARSER_MODELS
    from spmmgnn.nn.models import MODELS

    assert PARSER_MODELS == MODELS


def test_parser_network_names_are_the_presets():
    from spmmgnn.benchmark.costs import NETWORKS
    from spmmgnn.commands.model import NETWORK_NAMES

    assert sorted(NETWORK_NAMES) == sorted(NETWORKS)


def test_import_loads_no_kernel_compiler():
    """``import spmmgnn`` and the command line's parser (``spmmgnn --help``) load neither
    numba (its kernels are made on first use, ``spmmgnn.runtime.jit``), nor scipy's csgraph, nor
    torch, nor h5py; a product then runs."""
    code = ("import sys; import spmmgnn; from spmmgnn.cli import build_parser; build_parser()\n"
            "heavy = [m for m in ('numba', 'scipy.sparse.csgraph',"
            " 'torch', 'h5py') if m in sys.modules]; print(heavy)\n"
            "import numpy as np, scipy.sparse as sp\n"
            "A = sp.random(30, 30, density=0.2, random_state=1, format='csr')\n"
            "op = spmmgnn.DistSpMM.from_scipy(A, algorithm='sparse1d')\n"
            "x = np.arange(60.0).reshape(30, 2)\n"
            "assert np.allclose(op.gather_rows(op.matmul(op.scatter_rows(x))), A @ x)\n"
            "print('numba' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split("\n")[:2] == ["[]", "True"]


def test_a_lazy_kernel_is_handed_out_only_once_its_module_is_bound():
    """Two threads' first calls of a kernel that calls another kernel of its module: the
    second thread must not compile it while the first is still binding the module's
    globals (before the fix numba met a ``Lazy`` there: "Untyped global name"; seen as
    ``spmmgnn partition --method metis+maxsend`` failing on an empty numba cache, whose two
    candidates refine in two threads). Making the callee is slowed to hold the window open."""
    import threading
    import time

    from spmmgnn.runtime import jit

    jit.numba_pool()  # numba loaded: the first call reaches the binding at once
    module = {"__name__": "lazy_race"}
    exec("from spmmgnn.runtime.jit import njit\n\n"
         "@njit\ndef inner(x):\n    return x + 1\n\n"
         "@njit\ndef outer(x):\n    return inner(x) * 2\n", module)
    make = module["inner"]._make

    def slow_make():
        time.sleep(0.5)
        return make()

    module["inner"]._make = slow_make
    results, errors = [], []

    def first_call():
        try:
            results.append(module["outer"](1))
        except Exception as exc:  # noqa: BLE001 - the test reports whatever went wrong
            errors.append(f"{type(exc).__name__}: {exc}"[:300])

    a, b = threading.Thread(target=first_call), threading.Thread(target=first_call)
    a.start()
    time.sleep(0.1)
    b.start()
    a.join()
    b.join()
    assert errors == [] and results == [4, 4]


PROCESS_STATE = """
import json, os, sys, threading
env = dict(os.environ)
hooks = (sys.excepthook, threading.excepthook, sys.exit)
import numpy as np, scipy.sparse as sp
import spmmgnn, spmmgnn.nn, spmmgnn.training
after_import = (dict(os.environ) == env, (sys.excepthook, threading.excepthook, sys.exit) == hooks)
A = sp.random(300, 300, density=0.05, random_state=0, format="csr")
op = spmmgnn.DistSpMM.from_scipy(A)  # starts numba's OpenMP pool (libgomp loads here)
op.matmul(np.ones((300, 64)))
op.norm(np.ones(300))
after_calls = (dict(os.environ) == env, (sys.excepthook, threading.excepthook, sys.exit) == hooks)
print(json.dumps(dict(after_import=after_import, after_calls=after_calls,
                      installed=spmmgnn.runtime.abort.is_installed(),
                      changed=sorted(k for k in set(env) | set(os.environ)
                                     if env.get(k) != os.environ.get(k)))))
"""


def _process_state(**extra: str) -> dict:
    import json
    import os

    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME",
                        "OPENBLAS_THREAD_TIMEOUT", "SPMMGNN_ABORT_ON_EXCEPTION")}
    env.update(extra)
    proc = subprocess.run([sys.executable, "-c", PROCESS_STATE], capture_output=True,
                          text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_import_and_calls_leave_the_environment_and_hooks_alone():
    """``import spmmgnn`` (with its nn and training packages) and library calls that load
    the thread runtimes change neither ``os.environ`` (whose variables the caller's own
    OpenMP and BLAS code and child processes would inherit) nor ``sys.excepthook``,
    ``threading.excepthook`` or ``sys.exit``, in a fresh process."""
    got = _process_state()
    assert got["changed"] == [], got
    assert got["after_import"] == [True, True] and got["after_calls"] == [True, True], got
    assert got["installed"] is False


def test_abort_hook_on_request_at_import():
    """``SPMMGNN_ABORT_ON_EXCEPTION=1`` asks ``import spmmgnn`` for the abort hook (for a
    script one cannot edit); the environment is still left alone."""
    got = _process_state(SPMMGNN_ABORT_ON_EXCEPTION="1")
    assert got["installed"] is True and got["changed"] == [], got


def test_runtime_settings_only_while_loading_and_opt_out(monkeypatch):
    """``thread_env.loading`` puts the idle-thread variables the user did not set into the
    environment for a runtime loading inside it, and takes them out after; a value the user
    set is kept; ``SPMMGNN_KEEP_ENV=1`` sets none."""
    import os

    from spmmgnn.runtime import thread_env as runtimes

    for name in runtimes.WAIT_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENBLAS_THREAD_TIMEOUT", "28")
    monkeypatch.delenv(runtimes.KEEP_ENV, raising=False)
    with runtimes.loading():
        inside = {name: os.environ.get(name) for name in runtimes.WAIT_ENV}
    assert inside == dict(runtimes.WAIT_ENV, OPENBLAS_THREAD_TIMEOUT="28")
    assert os.environ.get("OMP_WAIT_POLICY") is None
    assert os.environ["OPENBLAS_THREAD_TIMEOUT"] == "28"
    monkeypatch.setenv(runtimes.KEEP_ENV, "1")
    with runtimes.loading():
        assert os.environ.get("OMP_WAIT_POLICY") is None
    runtimes.for_process()
    assert os.environ.get("OMP_WAIT_POLICY") is None
