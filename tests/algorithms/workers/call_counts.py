"""Issue 46's per-call validation: ``op.dot`` (``y is x`` or a copy), ``op.norm`` and
``op.gram`` of a few columns make one collective call each, the agreement folded into the
sum's all-reduce; ``validate=False`` makes one too (the sum's).

The grid's communicators are wrapped by a counter of the MPI calls made through them; the
operator's numbers are checked against numpy.
"""

from __future__ import annotations

import sys

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from spmmgnn import DistSpMM, ProcessGrid


class Counted:
    """``comm`` with a count of the collective calls made through it."""

    def __init__(self, comm: MPI.Comm, calls: list[str]):
        self._comm, self._calls = comm, calls

    def __getattr__(self, name: str):
        attr = getattr(self._comm, name)
        if name[:1].isalpha() and not name.startswith(("Get_", "Is_", "py2f")) and callable(
                attr) and name not in ("Split", "Dup", "Free", "Create_cart"):
            def counted(*args, **kwargs):
                self._calls.append(name)
                return attr(*args, **kwargs)
            return counted
        return attr


def check(op, x, y, X: np.ndarray, calls: list[str], validate: bool) -> None:
    """Each call's numbers against numpy, and its collective calls."""
    for what, fn, want in [
        ("dot(x, x)", lambda: op.dot(x, x), np.einsum("ij,ij->j", X, X)),
        ("dot(x, copy)", lambda: op.dot(x, y), np.einsum("ij,ij->j", X, X)),
        ("norm(x)", lambda: op.norm(x), np.linalg.norm(X, axis=0)),
        ("gram(x)", lambda: op.gram(x), X.T @ X),
    ]:
        calls.clear()
        got = fn()
        assert np.allclose(got, want, rtol=1e-12), (what, got, want)
        assert calls == ["Allreduce"], (validate, what, calls)


comm = MPI.COMM_WORLD
rank = comm.Get_rank()
n = 23
A = sp.random(n, n, density=0.2, random_state=1, format="csr")
X = np.random.default_rng(2).standard_normal((n, 3))
for validate in (True, False):
    op = DistSpMM.from_scipy(A if rank == 0 else None, ProcessGrid(comm), validate=validate)
    calls: list[str] = []  # (wrapped before the first call: its agreement keeps the comm)
    for name in ("comm", "across_block_rows", "across_replicas"):
        setattr(op.grid, name, Counted(getattr(op.grid, name), calls))
    x = op.scatter_rows(X if rank == 0 else None)
    check(op, x, x.copy(), X, calls, validate)
print(f"rank {rank}: OK\n", end="", flush=True)
sys.exit(0)
