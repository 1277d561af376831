"""The halo plan's verbs, the buffer pool and the byte counter, in one process."""

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI

import spmmgnn
from spmmgnn.exchange.halo import HaloPlan
from spmmgnn.runtime.buffers import BufferPool
from spmmgnn.runtime.stats import CommStats


def test_buffer_pool_reuses_per_key_and_slot():
    pool = BufferPool()
    a = pool.get("send", (3, 4), np.float32)
    assert pool.get("send", (3, 4), "float32") is a
    assert pool.get("send", (3, 4), np.float32, slot=1) is not a
    assert pool.get("send", (3, 5), np.float32) is not a
    assert pool.get("recv", (3, 4), np.float32) is not a
    assert pool.get("send", (3, 4), np.float64) is not a
    assert pool.nbytes() == 3 * 4 * 4 * 2 + 3 * 5 * 4 + 3 * 4 * 4 + 3 * 4 * 8


def test_count_exchange_splits_payload_and_parameters():
    s = CommStats()
    s.count_exchange(100, 40, param_bytes=10)
    s.count_exchange(7, 0)
    s.count_allreduce(24)
    assert (s.exchanges, s.bytes_sent, s.bytes_received) == (2, 107, 40)
    assert (s.payload_bytes_sent, s.param_bytes_sent) == (97, 10)
    assert (s.allreduces, s.allreduce_bytes) == (1, 24)


def test_stats_bound_at_build_survive_probe_symmetry():
    A = sp.random(30, 30, density=0.2, random_state=1, format="csr")
    op = spmmgnn.DistSpMM.from_scipy(A, spmmgnn.ProcessGrid(MPI.COMM_SELF),
                                     algorithm="sparse1d")
    op.matmul(np.ones((30, 2)))
    before = op.comm_stats()
    op.probe_symmetry()
    assert op.plan.stats is op.stats  # restored in place, not replaced
    after = op.comm_stats()
    counters = [k for k in before if not k.startswith("seconds") and k != "kernels"]
    assert [after[k] for k in counters] == [before[k] for k in counters]


def test_one_finish_for_both_directions():
    plan = HaloPlan(MPI.COMM_SELF, np.array([0, 5]), np.zeros(0, dtype=np.int64))
    x, ghost, other = np.ones((5, 3)), np.empty((0, 3)), np.empty((0, 3))
    assert plan.start_bcast(x, ghost).finish() is ghost
    assert plan.start_bcast(x, ghost).finish(into=other) is other
    out = np.full((5, 3), 2.0)
    assert plan.start_reduce(np.empty((0, 3)), out).finish() is out
    np.testing.assert_array_equal(out, 2.0)  # nothing arrives on one rank: untouched
    later = np.zeros((5, 3))
    assert plan.start_reduce(np.empty((0, 3))).finish(into=later) is later
    with pytest.raises(ValueError, match="into="):
        plan.start_reduce(np.empty((0, 3))).finish()
    assert plan.stats.exchanges == 5
