"""numpy <-> torch at the API boundary, without copies where the memory allows it."""

from __future__ import annotations

import sys

import numpy as np

FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def is_torch(x) -> bool:
    """Whether x is a torch tensor, without importing torch: a tensor exists only once its
    caller imported torch, so ``sys.modules`` has it whenever the answer is yes."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def to_numpy(x) -> np.ndarray:
    """A C-contiguous numpy view (or copy) of an array or CPU tensor."""
    if is_torch(x):
        x = x.detach()
        if x.device.type != "cpu":
            x = x.cpu()
        x = x.numpy()
    return np.ascontiguousarray(x)


def like_input(y: np.ndarray, template):
    """Return ``y`` as the same kind (numpy or torch) as ``template``."""
    if is_torch(template):
        return sys.modules["torch"].from_numpy(y)
    return y


def mpi_float_type(dtype):
    """The MPI datatype of a float32/float64 numpy dtype."""
    from mpi4py import MPI

    return MPI.FLOAT if np.dtype(dtype) == np.float32 else MPI.DOUBLE
