"""Where a grid's numbers live and how they reach the wire, chosen once per grid
(``ProcessGrid(device=...)``): the ``host`` backend (numpy arrays, the numba kernels) or the
``torch`` backend (tensors on ``"cpu"``, ``"cuda"`` or ``"cuda:k"``, torch's operations), both
behind the ``Backend`` interface of ``protocol``; the device rule for a caller's data
(``device``), the numpy <-> torch conversions (``convert``), the host staging of a torch
backend's MPI exchanges (``staging``), the integer codecs in torch (``torch_quantize``) and
the dense operations of a training step (``dense``).
"""

from __future__ import annotations

from mpi4py import MPI

from .host import HOST
from .protocol import Backend


def backend_for(device, comm: MPI.Comm) -> Backend:
    """Collective over ``comm``: the backend of a grid whose ranks resolved ``device``
    (``device.resolve_device``; None: the host backend)."""
    if device is None:
        return HOST
    from .staging import cuda_aware
    from .torch_backend import TorchBackend

    return TorchBackend(device, direct=cuda_aware(comm, device))
