"""Issue 46: ``from_scipy``, ``scatter_rows`` / ``gather_rows``, a permuted partition and the
``wire`` collectives move their arrays and metadata as buffers, never through pickle.

mpi4py's pickle is replaced by one that records what it is given: after the run only
scalars (the agreement reductions' counts and flags) may have gone through it.
"""

from __future__ import annotations

import pickle

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

pickled: list[type] = []


def recording_dumps(obj, *args, **kwargs):
    pickled.append(type(obj))
    return pickle.dumps(obj, *args, **kwargs)


MPI.pickle.__init__(recording_dumps, pickle.loads)

from spmmgnn import DistSpMM, Partition, ProcessGrid  # noqa: E402
from spmmgnn.layout import bcast_partition  # noqa: E402
from spmmgnn.runtime.wire import allgather_json, bcast_array, bcast_json, gather_json  # noqa: E402

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
root = size - 1
rng = np.random.default_rng(3)
n, f = 41, 3  # P does not divide n
A = sp.random(n, n, density=0.08, random_state=4, format="csr")  # not symmetric
A = sp.csr_array(A.multiply((np.arange(n) != 5)[:, None]))  # row 5 empty
X = rng.standard_normal((n, f))
parts = rng.integers(1, size, n)  # block row 0 is empty
parts[:3] = np.arange(3) % size

for algorithm in ("sparse1d", "oblivious1d"):
    op = DistSpMM.from_scipy(A if rank == root else None, ProcessGrid(comm),
                             algorithm=algorithm, partition=parts, root=root)
    x = op.scatter_rows(X if rank == root else None, root=root)
    full = op.gather_rows(op.matmul(x), root=root)
    vec = op.gather_rows(op.matmul(op.scatter_rows(X[:, 0] if rank == root else None,
                                                   root=root)), root=root)
    if rank == root:
        assert np.abs(full - A @ X).max() < 1e-12, algorithm
        assert np.abs(vec - A @ X[:, 0]).max() < 1e-12, algorithm
    assert op.partition.sizes.tolist() == np.bincount(parts, minlength=size).tolist()
    assert np.array_equal(op.partition.parts, parts)

mine = Partition.from_parts(parts, size, method="mine") if rank == root else None
got = bcast_partition(comm, mine, root)
assert got.method == "mine" and np.array_equal(got.perm, Partition.from_parts(
    parts, size).perm) and np.array_equal(got.parts, parts)
assert bcast_partition(comm, Partition.from_sizes([3, 0, 4][:size]) if rank == 0 else None
                       ).sizes.tolist() == [3, 0, 4][:size]
assert bcast_partition(comm, None, 0) is None
for value in (np.arange(12, dtype=np.float32).reshape(3, 4), np.zeros((0, 5)),
              np.array(7, dtype=np.int64), np.array([True, False])):
    out = bcast_array(comm, value if rank == 1 else None, root=1)
    assert out.dtype == value.dtype and out.shape == value.shape
    assert np.array_equal(out, value)
assert bcast_json(comm, {"a": [1, 2.5, None], "b": "x"} if rank == 0 else None) == {
    "a": [1, 2.5, None], "b": "x"}
assert allgather_json(comm, {"r": rank, "s": "é" * rank}) == [
    {"r": r, "s": "é" * r} for r in range(size)]
got = gather_json(comm, [rank] * rank, root=root)
assert got == ([[r] * r for r in range(size)] if rank == root else None)

data = [t for t in pickled if t not in (int, float, bool, type(None), np.bool_)]
assert not data, f"rank {rank} pickled {sorted({t.__name__ for t in data})}"
print(f"rank {rank}: OK ({len(pickled)} scalars pickled)\n", end="", flush=True)
