"""Per-rank counters of what an SpMM operator moved and how long it took."""

from __future__ import annotations

import time
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
    ``bytes_sent_intra`` + ``bytes_sent_inter`` = ``bytes_sent`` (and the same for received):
    the bytes to (from) ranks on my node and on other nodes (``spmmgnn.exchange.nodes``);
    ``as_dict`` reports them as ``bytes_sent_by_tier`` = ``{"intra": .., "inter": ..}``.
    ``bytes_device_to_host`` / ``bytes_host_to_device``: what the device path
    (``ProcessGrid(device=...)``) staged between the device and host buffers around MPI, its
    own tier: ``as_dict`` reports them as ``"device_host"`` in ``bytes_sent_by_tier`` /
    ``bytes_received_by_tier`` (not part of ``bytes_sent``, which counts rank to rank).
    ``bytes_shared_read``: rows a rank read out of other ranks' segments of a shared-memory
    window instead of receiving them (``shared``: the node-aware exchange inside a node);
    not part of ``bytes_received``.
    ``node_exchanges``: how many of the ``exchanges`` went node-aware (``node_exchange``).
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
    bytes_sent_intra: int = 0
    bytes_sent_inter: int = 0
    bytes_received_intra: int = 0
    bytes_received_inter: int = 0
    bytes_device_to_host: int = 0
    bytes_host_to_device: int = 0
    bytes_shared_read: int = 0
    calls_matmul: int = 0
    calls_matmul_t: int = 0
    exchanges: int = 0
    node_exchanges: int = 0
    allreduces: int = 0
    seconds_exchange: float = 0.0
    seconds_exchange_hidden: float = 0.0
    seconds_multiply: float = 0.0
    seconds_allreduce: float = 0.0
    seconds_codec: float = 0.0
    # of bytes_sent / bytes_received: the layout conversions (``oblivious2d``/``3d``: rows to
    # SUMMA's 2D blocks and back), reported apart as ``bytes_*_by_phase["convert"]``
    convert_bytes_sent: int = 0
    convert_bytes_received: int = 0

    @property
    def calls(self) -> int:
        return self.calls_matmul + self.calls_matmul_t

    def as_dict(self) -> dict:
        d = asdict(self)
        d["calls"] = self.calls
        for way in ("sent", "received"):
            d[f"bytes_{way}_by_tier"] = {tier: d.pop(f"bytes_{way}_{tier}")
                                         for tier in ("intra", "inter")}
            convert = d.pop(f"convert_bytes_{way}")
            d[f"bytes_{way}_by_phase"] = {"algorithm": d[f"bytes_{way}"] - convert,
                                          "convert": convert}
        d["bytes_sent_by_tier"]["device_host"] = d.pop("bytes_device_to_host")
        d["bytes_received_by_tier"]["device_host"] = d.pop("bytes_host_to_device")
        return d

    def reset(self) -> None:
        self.load(CommStats())

    def load(self, other: CommStats) -> None:
        """Set every counter to ``other``'s, in place (holders of this object see them)."""
        for k, v in asdict(other).items():
            setattr(self, k, v)

    def count_exchange(self, sent: int, received: int, param_bytes: int = 0,
                       inter_sent: int | None = None, inter_received: int | None = None,
                       legs: int = 1) -> None:
        """One data exchange: the bytes this rank sent to other ranks (payload plus
        ``param_bytes`` of codec parameters) and received from them, of which
        ``inter_sent`` / ``inter_received`` crossed between nodes (None: all of them, the
        conservative count of an exchange that does not know its peers' nodes). ``legs``:
        what this adds to ``exchanges`` (a node-aware exchange counts its first leg as 1 and
        the other two as 0). Every algorithm counts its bytes here, or adds the same
        ``exchange_deltas`` made once for an exchange that repeats (``add_exchange``)."""
        self.add_exchange(exchange_deltas(sent, received, param_bytes, inter_sent,
                                          inter_received, legs))

    def add_exchange(self, d: tuple[int, ...]) -> None:
        """Add one exchange's ``exchange_deltas`` (the halo routes make them once per
        buffer pair: nothing is converted or summed per call)."""
        self.exchanges += d[0]
        self.bytes_sent += d[1]
        self.bytes_received += d[2]
        self.bytes_sent_inter += d[3]
        self.bytes_sent_intra += d[4]
        self.bytes_received_inter += d[5]
        self.bytes_received_intra += d[6]
        self.payload_bytes_sent += d[7]
        self.param_bytes_sent += d[8]

    def count_convert(self, sent: int, received: int) -> None:
        """Of an exchange counted with ``count_exchange``: bytes that only changed the
        layout of the dense rows (not the algorithm's own movement), reported apart."""
        self.convert_bytes_sent += int(sent)
        self.convert_bytes_received += int(received)

    def count_allreduce(self, nbytes: int) -> None:
        """One all-reduce of a local buffer of ``nbytes`` over the replicas."""
        self.allreduces += 1
        self.allreduce_bytes += int(nbytes)

    def timing(self, field: str) -> _Timing:
        """``with stats.timing("seconds_multiply"): ...`` adds the block's seconds to that
        counter (a plain class, not a generator: the per-call path runs five of these)."""
        return _Timing(self, field)


class _Timing:
    """The context manager of ``CommStats.timing``."""

    __slots__ = ("stats", "field", "t0")

    def __init__(self, stats: CommStats, field: str):
        self.stats, self.field = stats, field

    def __enter__(self) -> None:
        self.t0 = time.perf_counter()

    def __exit__(self, *exc) -> None:
        setattr(self.stats, self.field,
                getattr(self.stats, self.field) + time.perf_counter() - self.t0)


def exchange_deltas(sent: int, received: int, param_bytes: int = 0,
                    inter_sent: int | None = None, inter_received: int | None = None,
                    legs: int = 1) -> tuple[int, ...]:
    """What ``CommStats.count_exchange`` adds to the counters, in ``add_exchange``'s order:
    (exchanges, bytes sent, received, sent inter, sent intra, received inter, received
    intra, payload sent, parameters sent)."""
    sent, received, param_bytes = int(sent), int(received), int(param_bytes)
    inter_sent = sent if inter_sent is None else int(inter_sent)
    inter_received = received if inter_received is None else int(inter_received)
    return (int(legs), sent, received, inter_sent, sent - inter_sent, inter_received,
            received - inter_received, sent - param_bytes, param_bytes)
