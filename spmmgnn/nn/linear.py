"""The layers' dense products as one differentiable operation: ``linear(h, w, b, add)`` =
``h @ w + b + add``. The layers call their grid's backend (``op.grid.backend.linear``); this
is the host backend's, for CPU tensors (``backend.dense_host``: OpenBLAS in row panels and a
numba pass, the layouts and thread rules documented there)."""

from __future__ import annotations

from ..backend.dense_host import (  # noqa: F401 (the names of the host products)
    PANEL_ROWS,
    Linear,
    linear,
    panel_matmul,
    run_panels,
    weight_grad,
)
