"""What a partitioning method will cost, from the graph's size, before paying it.

``estimate(method, n, nnz, k)`` gives the peak resident memory and the seconds a method
takes on a graph of ``n`` vertices and ``nnz`` non-zeros, from a small model fitted on the
measured rows of ``MEASURED`` (``bench/results/large-graph.md``, ``partition_real.md``;
``bench/large_graph.py`` and ``bench/partition.py``, a 2-core machine shared with other
work, so the seconds are those of a loaded machine):

* memory: affine in nnz, the slope the secant through the method's two largest finished
  rows, the fixed part the least that keeps every finished row's peak at or under the
  estimate (conservative on the measured sizes; above them the slope extrapolates), and at
  least ``UNFINISHED_MARGIN`` times the last peak of a run stopped on a graph no larger;
* seconds: a power law ``c * nnz^a`` fitted by least squares in log-log on the method's rows
  (at least linear in nnz), times ``log2(k) / 6`` above k = 64; ``default``'s is its time
  rule, 3x METIS-vol's estimate (at least 2 s). The same method can differ by 10-100x
  between graphs of one size (METIS-vol: 7 s on GCIDE, 349 s on an R-MAT graph of a quarter
  its non-zeros), so the seconds say the order of magnitude only.

``check_estimate`` refuses, with one clear line, a method whose estimated peak does not fit in
the memory available (``machine.available_bytes``; ``SPMMGNN_AVAILABLE_MEMORY`` overrides
it), before any partitioning work. ``default`` above ``KAMINPAR_ONLY_NNZ`` non-zeros runs
KaMinPar alone (nothing else finished there), so its estimate is KaMinPar's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..runtime.errors import SpmmgnnError
from ..runtime.machine import available_bytes, format_bytes, format_bytes_apart
from .budget import DEFAULT_BUDGET, DEFAULT_MIN_BUDGET
from .contract import coarsened

# ``default`` runs KaMinPar alone from this many non-zeros on: at R-MAT 2^22 (5.7e7
# non-zeros) KaMinPar took 653 s at 8.0 GB and METIS-vol had not finished after 16 min
KAMINPAR_ONLY_NNZ = 50_000_000
# the interpreter, numpy/scipy/numba and the partitioner libraries, before the graph
BASE_BYTES = 200 * 2**20
MIB = 2**20
# ``partition`` prints the estimate when it expects at least this many seconds
SAY_AFTER = 3.0

# (method, n, nnz, k, seconds, peak MiB): measured rows (a loaded 2-core machine); a row
# that did not finish gives a lower bound of its memory (seconds None)
MEASURED: tuple[tuple[str, int, int, int, float | None, float], ...] = (
    # bench/results/partition_real.md (Debian graphs)
    ("metis-vol", 116_650, 367_578, 64, 0.51, 255.7),
    ("metis-vol", 145_870, 1_086_768, 64, 2.16, 322.8),
    ("metis-vol", 164_383, 3_417_186, 16, 7.21, 584.9),
    ("kaminpar", 116_650, 367_578, 64, 0.59, 240.1),
    ("kaminpar", 145_870, 1_086_768, 64, 2.44, 290.0),
    ("kaminpar", 164_383, 3_417_186, 64, 0.70, 461.8),
    ("default", 116_650, 367_578, 64, 1.82, 258.4),
    ("default", 145_870, 1_086_768, 64, 5.72, 323.2),
    ("default", 164_383, 3_417_186, 16, 32.9, 586.1),
    # bench/results/large-graph.md: R-MAT 2^16-2^18, edge factor 7 (load 12-23)
    ("metis-vol", 65_536, 842_534, 64, 349.2, 336.9),
    ("kaminpar", 65_536, 842_534, 64, 16.1, 286.8),
    ("kaminpar", 262_144, 3_466_652, 64, 36.9, 586.0),
    # R-MAT 2^20 and 2^22 with the in-place symmetrization and the light-first rebalance
    # (2026-11-26, load 1-5; the rows before them, 1.6 and 8.0 GB, predate both)
    ("kaminpar", 1_048_576, 14_128_612, 64, 36.3, 1260.0),
    # (the KaMinPar phase varies between runs: 6.83 GiB in a second run of the same call)
    ("kaminpar", 4_194_304, 57_234_642, 64, 520.4, 6994.0),
    ("metis-vol", 4_194_304, 57_234_642, 64, None, 9420.8),
    # R-MAT 2^24: KaMinPar still growing at 22.2 GB after 9 min, stopped before the OOM
    # killer (2026-11-26, load 4)
    ("kaminpar", 16_777_216, 230_906_302, 64, None, 21650.0),
)
# KaMinPar on the contraction (``contract``: n x k above COARSEN_ABOVE), the same columns
MEASURED_COARSE: tuple[tuple[str, int, int, int, float | None, float], ...] = (
    # R-MAT 2^22 with the contraction forced (COARSEN_ABOVE 0; 2026-11-26, load ~3 beside
    # the test suite)
    ("kaminpar", 4_194_304, 57_234_642, 64, 137.1, 2399.6),
    # R-MAT 2^24 (nice 5 beside the test suite: most of its 28 minutes without a core)
    ("kaminpar", 16_777_216, 230_906_302, 64, 1662.2, 8308.7),
    # the same at k = 256 (nice 10 beside the test suite)
    ("kaminpar", 16_777_216, 230_906_302, 256, 1239.0, 8820.2),
    # and at k = 1,024 (nice 15 beside the test suite)
    ("kaminpar", 16_777_216, 230_906_302, 1024, 917.6, 9596.9),
)
# how far above its last peak an unfinished run is assumed to go
UNFINISHED_MARGIN = 1.25

# hypergraph methods (no large rows measured): bytes per pin of the column-net hypergraph
# (Mt-KaHyPar's Python interface copies the nets as Python ints, about 60 bytes a pin, and
# its own structures several times that) and the slowest measured rate (gcide: 180-337 s)
HYPERGRAPH_BYTES_PER_PIN, HYPERGRAPH_SECONDS_PER_PIN = 400.0, 1.0e-4
# the column-net hypergraph and refinement state of ``+maxsend`` / ``+multilevel``
REFINE_BYTES_PER_PIN, REFINE_SECONDS_PER_PIN = 120.0, 2.0e-6


@dataclass(frozen=True)
class Estimate:
    """The estimated peak resident bytes and seconds of ``method`` on a graph."""

    method: str
    n: int
    nnz: int
    k: int
    peak_bytes: float
    seconds: float

    def line(self) -> str:
        return (f"estimate for {self.method} k={self.k} (n={self.n:,}, nnz={self.nnz:,}): "
                f"about {format_bytes(self.peak_bytes)} peak, {_duration(self.seconds)} "
                "(fitted on measured rows, a loaded 2-core machine)")


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def _fit(method: str, measured=MEASURED) -> tuple[float, float, float, float, float]:
    """(fixed bytes, bytes per non-zero, bytes per vertex, c, a) of ``method`` from its rows.

    Memory is affine in nnz: the slope is the secant through the method's two largest
    finished rows (the libraries' fixed memory cancels there; on small graphs it swamps the
    bytes per non-zero), the fixed part the smallest that puts every finished row at or
    under the line (an unfinished row bounds the estimate from below: ``estimate``). A
    method with one row: its bytes per non-zero above ``BASE_BYTES``."""
    rows = [r for r in measured if r[0] == method]
    done = [r for r in rows if r[4] is not None]  # an unfinished row's peak is a bound only
    # the secant's two points: the largest peak at each of the two largest sizes
    top: dict[int, tuple] = {}
    for r in done if len(done) >= 2 else rows:
        if r[2] not in top or r[5] > top[r[2]][5]:
            top[r[2]] = r
    big = sorted(top.values(), key=lambda r: r[2])[-2:]
    if len(big) == 2 and big[1][2] > big[0][2]:
        per_nnz = max(0.0, (big[1][5] - big[0][5]) * MIB / (big[1][2] - big[0][2]))
    else:
        per_nnz = max((r[5] * MIB - BASE_BYTES) / max(r[2], 1) for r in rows)
    per_n = 0.0  # n and nnz grow together on the measured graphs
    fixed = max(BASE_BYTES, max(r[5] * MIB - per_nnz * r[2] for r in (done or rows)))
    timed = [(math.log(r[2]), math.log(r[4])) for r in rows if r[4]]
    if len(timed) < 2:
        x, y = timed[0]
        return fixed, per_nnz, per_n, math.exp(y - x), 1.0
    mx = sum(x for x, _ in timed) / len(timed)
    my = sum(y for _, y in timed) / len(timed)
    sxx = sum((x - mx) ** 2 for x, _ in timed)
    a = max(1.0, sum((x - mx) * (y - my) for x, y in timed) / sxx) if sxx else 1.0
    return fixed, per_nnz, per_n, math.exp(my - a * mx), a


def resolve(method: str, nnz: int) -> str:
    """The method ``partition`` runs for ``method`` on ``nnz`` non-zeros (``default``
    above ``KAMINPAR_ONLY_NNZ``: ``kaminpar``)."""
    name = str(method).strip().lower()
    return "kaminpar" if name == "default" and nnz >= KAMINPAR_ONLY_NNZ else name


def estimate(method: str, n: int, nnz: int, k: int) -> Estimate:
    """The estimated peak memory and seconds of ``method`` (a method name or preset) on a
    graph of ``n`` vertices and ``nnz`` non-zeros (of the matrix ``partition`` receives)."""
    name = resolve(method, nnz)
    base, _, refine = name.partition("+")
    if base.startswith("twolevel:"):
        base = base.split(":", 1)[1].split("+")[0]
    pins = nnz + n
    fitted = {"metis-vol", "kaminpar", "default", "quality"}
    if base in ("metis", "metis-cut", "quality"):
        key = "metis-vol" if base != "quality" else "default"
    elif base in fitted:
        key = base
    else:
        key = None
    rows = MEASURED
    if key == "kaminpar" and coarsened(n, k):
        rows = MEASURED_COARSE  # KaMinPar on the contraction: its own rows
    scale = max(1.0, math.log2(max(k, 2)) / 6.0)
    if key is not None:
        fixed, per_nnz, per_n, c, a = _fit(key, rows)
        peak = fixed + per_nnz * nnz + per_n * n
        # a run stopped before it finished still needed more than its last peak: on a graph
        # at least as large, at least that (``UNFINISHED_MARGIN`` times)
        peak = max([peak] + [UNFINISHED_MARGIN * r[5] * MIB for r in rows
                             if r[0] == key and r[4] is None and r[2] <= nnz])
        seconds = c * max(nnz, 1) ** a * scale
        if key == "default":  # its time rule: 3x METIS-vol's time, at least 2 s
            _, _, _, cm, am = _fit("metis-vol")
            seconds = max(DEFAULT_MIN_BUDGET, DEFAULT_BUDGET * cm * max(nnz, 1) ** am * scale)
        if base == "metis":
            seconds *= 2
        if base == "quality":
            seconds *= 20.0 / 3.0
    elif base in ("kahypar", "mtkahypar", "mtkahypar-fast"):
        peak = BASE_BYTES + HYPERGRAPH_BYTES_PER_PIN * pins
        seconds = HYPERGRAPH_SECONDS_PER_PIN * pins * scale
    else:  # block, random: the load vector and the part vector
        peak, seconds = BASE_BYTES + 24.0 * n + 8.0 * nnz, 1e-7 * nnz
    if refine:
        peak += REFINE_BYTES_PER_PIN * pins
        seconds += REFINE_SECONDS_PER_PIN * pins * scale
    return Estimate(name, int(n), int(nnz), int(k), float(peak), float(seconds))


def check_estimate(est: Estimate, graph_bytes: float = 0.0) -> None:
    """SpmmgnnError (one line) when ``est``'s peak, less what is already resident (the
    interpreter's ``BASE_BYTES`` and the graph's ``graph_bytes``), does not fit in the memory
    available now."""
    have = available_bytes()
    need = est.peak_bytes - BASE_BYTES - graph_bytes
    if have is not None and need > have:
        need_text, have_text = format_bytes_apart(need, have)
        raise SpmmgnnError(
            f"{est.method} k={est.k} on n={est.n:,}, nnz={est.nnz:,} needs about "
            f"{need_text} more memory (a peak of about {format_bytes(est.peak_bytes)},"
            f" estimate fitted on measured rows) and this node has {have_text} "
            "available; use a machine with more memory, the method kaminpar (the leanest), "
            "or partition offline (dKaMinPar, ParMETIS) and pass the part vector to "
            "'spmmgnn partition --from-parts' (docs/partitioning.md, Beyond one machine)")
