"""MPI worker, launched MPMD (one rank per section, each its own command line): ranks given
different settings get one error on every rank, naming the setting and each rank's value,
before any work; ranks in different calls of one operator get one error.

Usage: mpiexec -n 1 python run_agreement.py OUT.json a : -n 1 python run_agreement.py OUT.json b

Each case runs on every rank with the settings of this rank's variant (a or b):
``spmmgnn.cli.main`` with the command line of its variant (stderr captured: the error line
is rank 0's), the library's ``run_training`` (``RunSpec``), ``Trainer`` (``TrainConfig``),
``DistSpMM`` and ``ProcessGrid`` constructors, ``$SPMMGNN_PERSISTENT`` set on one rank, and
a fresh operator whose first calls differ (matmul on one rank, dot on the other) and then
calls of other kinds. Rank 0 writes {case: [[status, text] per rank]}; nothing is asserted
here. A case that left the ranks in different collectives hangs (the test's timeout).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import tempfile

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

import spmmgnn
from spmmgnn import SpmmgnnError
from spmmgnn.cli import main
from spmmgnn.data.csbm import csbm
from spmmgnn.training import RunSpec, TrainConfig, Trainer, distribute_graph, run_training

comm = MPI.COMM_WORLD
out_path, variant = sys.argv[1], sys.argv[2]
b = variant == "b"
tmp = tempfile.mkdtemp(prefix="agreement-") if comm.rank == 0 else None
tmp = comm.bcast(tmp)
CK = os.path.join(tmp, "ck.npz")
TRAIN = ["train", "--csbm-n", "300", "--epochs", "2", "--quiet"]
SPMM = ["spmm", "--scale", "6", "--repeat", "2"]
# name: (extra arguments of variant a, of variant b)
CLI = {
    "epochs": (["--epochs", "2"], ["--epochs", "3"]),
    "algorithm": (["--algorithm", "sparse1d"], ["--algorithm", "oblivious1d"]),
    "plexus_blocks": (["--algorithm", "plexus3d", "--plexus-blocks", "1"],
                      ["--algorithm", "plexus3d", "--plexus-blocks", "2"]),
    "grid_layout": (["--algorithm", "oblivious2d"], ["--algorithm", "oblivious2d",
                                                     "--grid-layout"]),
    "eval_every": (["--eval-every", "1"], ["--eval-every", "2"]),
    "checkpoint_every": (["--checkpoint", CK, "--checkpoint-every", "1"],
                         ["--checkpoint", CK, "--checkpoint-every", "2"]),
    "label_propagation": ([], ["--label-propagation", "0.5"]),
    "resume": (["--checkpoint", CK], ["--checkpoint", CK, "--resume"]),
    "lr": (["--lr", "0.01"], ["--lr", "0.1"]),
    "seed": (["--seed", "0"], ["--seed", "1"]),
    "dropout": (["--dropout", "0.5"], ["--dropout", "0.2"]),
    "hidden": (["--hidden", "8"], ["--hidden", "16"]),
    "dtype": (["--dtype", "float32"], ["--dtype", "float64"]),
    "layers": (["--layers", "2"], ["--layers", "3"]),
    "model": (["--model", "gcn"], ["--model", "sage"]),
    "layernorm": ([], ["--layernorm"]),
    "threads": (["--threads", "1"], ["--threads", "0"]),
}


def cli(argv: list[str], env: dict | None = None) -> list:
    """``spmmgnn ARGV`` on this rank, with ``env`` set for its duration: [status, stderr]."""
    saved = {k: os.environ.get(k) for k in env or {}}
    os.environ.update(env or {})
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            code = main(argv)
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    return [code, err.getvalue()]


def caught(fn, env: dict | None = None) -> list:
    """[collective, message] of the SpmmgnnError ``fn`` raised, or [None, result]."""
    saved = {k: os.environ.get(k) for k in env or {}}
    os.environ.update(env or {})
    try:
        return [None, fn()]
    except SpmmgnnError as exc:
        return [exc.collective, str(exc)]
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)


cases: dict[str, list] = {}
for name, (mine_a, mine_b) in CLI.items():
    cases[f"train_{name}"] = cli(TRAIN + (mine_b if b else mine_a))
cases["spmm_repeat"] = cli(SPMM + (["--repeat", "3"] if b else []))
cases["spmm_algorithms"] = cli(SPMM + ["--algorithm", "sparse1d", *(["oblivious1d"] if b
                                                                   else [])])
cases["spmm_dtype"] = cli(SPMM + ["--dtype", "float64" if b else "float32"])
cases["spmm_or_train"] = cli(TRAIN if b else SPMM)
cases["bench"] = cli(["bench", "--preset", "quick", "--repeat", "3" if b else "2"])
cases["partition"] = cli(["partition", "g.mtx", "-o", "g.h5", "-k", "3" if b else "2"])
cases["usage_error"] = cli(TRAIN + ["--epochs", "x" if b else "2"])
cases["persistent_env"] = cli(SPMM, {"SPMMGNN_PERSISTENT": "0"} if b else None)

# the library: RunSpec, TrainConfig, the operator's and the grid's arguments
cases["run_spec"] = caught(lambda: run_training(RunSpec(csbm_n=300, epochs=3 if b else 2),
                                                comm, report=False))
grid = spmmgnn.ProcessGrid(comm)
graph = csbm(n=300, avg_degree=5, num_features=8, num_classes=3, seed=0) if comm.rank == 0 \
    else None
data = distribute_graph(graph, grid, "gcn")
for field, values in dict(epochs=(2, 3), lr=(0.01, 0.1), seed=(0, comm.rank),
                          dropout=(0.5, 0.1)).items():
    cases[f"train_config_{field}"] = caught(lambda f=field, v=values: Trainer(
        data, TrainConfig(**{f: v[1] if b else v[0]}, progress=False)))
n = 40
A = sp.random(n, n, density=0.1, format="csr", random_state=1) + sp.eye(n)
mine = A if comm.rank == 0 else None
cases["operator_exchange"] = caught(lambda: spmmgnn.DistSpMM.from_scipy(
    mine, grid, exchange="node" if b else "flat"))
cases["operator_persistent_env"] = caught(lambda: spmmgnn.DistSpMM.from_scipy(mine, grid),
                                          {"SPMMGNN_PERSISTENT": "0"} if b else None)
cases["grid_device"] = caught(lambda: spmmgnn.ProcessGrid(comm, device=None if b else "cpu"))

# calls of one operator: the first call differs (the call probe is made there), then others
op = spmmgnn.DistSpMM.from_scipy(mine, grid)
X = np.random.default_rng(0).standard_normal((n, 2))
x = X[op.row_ids("input")]
y = X[op.row_ids("output")]
calls = {
    "first_matmul_vs_dot": (lambda: op.matmul(x), lambda: op.dot(x, x)),
    "matmul_vs_gram": (lambda: op.matmul(x), lambda: op.gram(x)),
    "norm_vs_matmul_t": (lambda: op.norm(x), lambda: op.matmul_t(y)),
    "allreduce_vs_matmul": (lambda: op.allreduce(np.ones(3)), lambda: op.matmul(x)),
    "fetch_rows_vs_dot": (lambda: op.fetch_rows(x, [0, 1]), lambda: op.dot(x, x)),
    "qr_vs_allgather_rows": (lambda: op.qr(x), lambda: op.allgather_rows(x)),
    "scatter_rows_vs_norm": (lambda: op.scatter_rows(X if comm.rank == 0 else None),
                             lambda: op.norm(x)),
}
for name, (call_a, call_b) in calls.items():
    cases[name] = caught(lambda a=call_a, c=call_b: [(c if b else a)(), None][1])
full = op.gather_rows(op.matmul(x))  # the operator still works afterwards
cases["after"] = [None, float(np.abs(full - A @ X).max()) if comm.rank == 0 else 0.0]

got = comm.gather(cases, root=0)
if comm.rank == 0:
    with open(out_path, "w") as fh:
        json.dump({k: [g[k] for g in got] for k in cases}, fh)
