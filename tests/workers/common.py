"""Pieces the MPI test workers share (run as scripts, they import this as a sibling: a worker
outside tests/workers/ first puts this folder on ``sys.path``)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from spmmgnn import SpmmgnnError


def message(fn, comm: MPI.Comm = MPI.COMM_WORLD) -> list | None:
    """Every rank's SpmmgnnError message from calling ``fn`` (None where none was raised),
    gathered on rank 0 (None elsewhere)."""
    try:
        fn()
        msg = None
    except SpmmgnnError as exc:
        msg = str(exc)
    return comm.gather(msg, root=0)


def one_way(g):
    """``g`` less a random 30 % of its edges, one direction at a time (A != A^T): the
    directed graph of the training parity workers and of their PyTorch reference."""
    A = g.adj.tocoo()
    keep = np.random.default_rng(3).random(A.nnz) < 0.7
    g.adj = sp.csr_array((A.data[keep], (A.row[keep], A.col[keep])), shape=A.shape)
    g.directed = True
    return g
