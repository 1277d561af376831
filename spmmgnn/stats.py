"""Per-rank counters of what an SpMM operator moved and how long it took."""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass


@dataclass
class CommStats:
    """Cumulative counters for one rank. Bytes count data exchanges only (no plan setup).

    ``bytes_sent``/``bytes_received``: rows moved between different ranks by the row exchange
    (halo bcast/reduce, or block-row broadcasts), payload plus codec parameters.
    ``payload_bytes_sent`` + ``param_bytes_sent`` = ``bytes_sent`` (codec parameters, e.g. the
    per-row range of the integer codecs, are the second part).
    ``allreduce_bytes``: the partial-result all-reduce over the replicas (1.5D), counted as the
    local buffer size per call.
    ``seconds_exchange`` is *exposed* exchange time: the rank waited in packing, posting or
    completing an exchange. ``seconds_exchange_hidden`` is the time an exchange was in flight
    while the rank computed (posted, not yet waited for): an upper bound on the transfer time
    hidden behind computation (how much of it MPI progressed is MPI's business).
    """

    bytes_sent: int = 0
    bytes_received: int = 0
    payload_bytes_sent: int = 0
    param_bytes_sent: int = 0
    allreduce_bytes: int = 0
    calls_matmul: int = 0
    calls_matmul_t: int = 0
    exchanges: int = 0
    allreduces: int = 0
    seconds_exchange: float = 0.0
    seconds_exchange_hidden: float = 0.0
    seconds_multiply: float = 0.0
    seconds_allreduce: float = 0.0
    seconds_codec: float = 0.0

    @property
    def calls(self) -> int:
        return self.calls_matmul + self.calls_matmul_t

    def as_dict(self) -> dict:
        d = asdict(self)
        d["calls"] = self.calls
        return d

    def reset(self) -> None:
        for k, v in asdict(CommStats()).items():
            setattr(self, k, v)

    @contextmanager
    def timing(self, field: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            setattr(self, field, getattr(self, field) + time.perf_counter() - t0)
