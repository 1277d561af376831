"""The gradient all-reduce of replicated weights: ``spmmgnn.nn.allreduce_gradients``.

Every rank holds the same weights and computes the gradient of its own rows' share of the
loss; the full gradient is the sum of the shares over the ranks holding distinct rows
(``grid.across_block_rows``), each row once. Summing over the whole world instead would count
each row c times on a 1.5D grid (c replicas of every block row). The rule is
``spmmgnn.collectives.allreduce_rows``, which the trainer uses too.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import torch
from mpi4py import MPI

from ..collectives import allreduce_rows
from ..errors import agree


def allreduce_gradients(parameters: Iterable[torch.Tensor], op_or_grid) -> None:
    """Collective: sum the ``.grad`` of replicated ``parameters`` over the ranks holding
    distinct rows, in one all-reduce; afterwards every rank holds the same gradient (call it
    between ``loss.backward()`` and ``optimizer.step()``). ``op_or_grid``: the operator the
    loss came through (a ``DistSpMM``) or its ``ProcessGrid``. A parameter without a
    gradient gets zeros, so every rank reduces the same buffer; ranks that pass different
    parameter sizes get one ``SpmmgnnError`` instead of a hang."""
    grid = getattr(op_or_grid, "grid", op_or_grid)
    params = list(parameters)
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    flat = torch.cat([p.grad.detach().reshape(-1).to(torch.float64) for p in params]) \
        if params else torch.zeros(0, dtype=torch.float64)
    sizes = np.array([flat.numel(), -flat.numel()], dtype=np.int64)
    if grid.comm.Get_size() > 1:
        grid.comm.Allreduce(MPI.IN_PLACE, sizes, op=MPI.MAX)
    agree(grid.comm, None if sizes[0] == -sizes[1] else
          "allreduce_gradients: the ranks pass parameters of different sizes")
    buf = flat.numpy()
    allreduce_rows(grid, buf)
    offset = 0
    with torch.no_grad():
        for p in params:
            n = p.numel()
            p.grad.copy_(flat[offset:offset + n].view_as(p.grad))
            offset += n
