"""The machine's alpha (latency, s) and beta (s per byte) from two microbenchmarks:

* ping-pong between ranks 0 and 1: one-way time t(m) = alpha + beta m, fitted by least squares
  over message sizes m (half the round trip, best of a few repetitions);
* all-to-all of m bytes per pair over all ranks: t(m) = (P - 1)(alpha_a2a + beta_a2a m), the
  personalized-exchange cost the sparse algorithms pay;
* ``all_reduce``: a float32 sum ``Allreduce`` of m bytes, t(m) = alpha + beta m (the
  gradient all-reduce of a training step).
"""

from __future__ import annotations

import time

import numpy as np
from mpi4py import MPI

from ..runtime.errors import agree
from ..runtime.wire import bcast_json

SIZES = tuple(2 ** e for e in range(3, 23, 2))  # 8 B ... 4 MiB


def _fit(sizes: np.ndarray, seconds: np.ndarray) -> tuple[float, float]:
    """(alpha, beta) of seconds = alpha + beta * sizes, both clipped at 0."""
    beta, alpha = np.polyfit(sizes.astype(float), seconds, 1)
    return max(float(alpha), 0.0), max(float(beta), 0.0)


def ping_pong(comm: MPI.Comm, sizes=SIZES, repeat: int = 20) -> dict:
    """Collective; ranks other than 0 and 1 only wait. Returns the fit and the samples."""
    me = comm.Get_rank()
    times = []
    for m in sizes:
        buf = np.zeros(m, dtype=np.uint8)
        best = float("inf")
        comm.Barrier()
        for _ in range(repeat):
            t0 = time.perf_counter()
            if me == 0:
                comm.Send([buf, MPI.BYTE], dest=1, tag=7)
                comm.Recv([buf, MPI.BYTE], source=1, tag=7)
            elif me == 1:
                comm.Recv([buf, MPI.BYTE], source=0, tag=7)
                comm.Send([buf, MPI.BYTE], dest=0, tag=7)
            best = min(best, (time.perf_counter() - t0) / 2)
        times.append(best)
    times = np.array(bcast_json(comm, times, root=0))
    alpha, beta = _fit(np.array(sizes), times)
    return dict(alpha=alpha, beta=beta, sizes=list(sizes), seconds=times.tolist())


def all_to_all(comm: MPI.Comm, sizes=SIZES, repeat: int = 10) -> dict:
    """Collective. Per-pair alpha and beta of an all-to-all (time divided by P - 1)."""
    P = comm.Get_size()
    times = []
    for m in sizes:
        send = np.zeros(m * P, dtype=np.uint8)
        recv = np.empty_like(send)
        best = float("inf")
        for _ in range(repeat):
            comm.Barrier()
            t0 = time.perf_counter()
            comm.Alltoall([send, MPI.BYTE], [recv, MPI.BYTE])
            best = min(best, time.perf_counter() - t0)
        times.append(comm.allreduce(best, op=MPI.MAX) / (P - 1))
    alpha, beta = _fit(np.array(sizes), np.array(times))
    return dict(alpha=alpha, beta=beta, sizes=list(sizes), seconds=times)


def all_reduce(comm: MPI.Comm, sizes=SIZES, repeat: int = 10) -> dict:
    """Collective. alpha and beta of a float32 sum ``Allreduce`` of m bytes (the slowest
    rank's best of ``repeat``): t(m) = alpha + beta m."""
    times = []
    for m in sizes:
        buf = np.zeros(max(1, m // 4), dtype=np.float32)
        best = float("inf")
        for _ in range(repeat):
            comm.Barrier()
            t0 = time.perf_counter()
            comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
            best = min(best, time.perf_counter() - t0)
        times.append(comm.allreduce(best, op=MPI.MAX))
    alpha, beta = _fit(np.array(sizes), np.array(times))
    return dict(alpha=alpha, beta=beta, sizes=list(sizes), seconds=times)


def measure(comm: MPI.Comm, repeat: int = 20) -> dict:
    """Collective: both microbenchmarks; needs at least two ranks."""
    agree(comm, None if comm.Get_size() > 1 else
          "the network microbenchmark needs at least 2 ranks (mpiexec -n 2 ...)")
    pp = ping_pong(comm, repeat=repeat)
    a2a = all_to_all(comm, repeat=max(3, repeat // 2))
    return dict(kind="network", P=comm.Get_size(), alpha=pp["alpha"], beta=pp["beta"],
                ping_pong=pp, all_to_all=a2a)
