"""The model against measurement: bare-SpMM records of a bench results file next to the
alpha-beta model's predictions for the same (P, c, algorithm, f), with the local rate they
imply and whether the measured bytes equal the predicted ones."""

from __future__ import annotations

import dataclasses

import numpy as np

from .costs import Machine, build_layout, spmm_time
from .records import read_records
from .volumes import VOLUMES, predict


def spmm_records(path: str, graph: str) -> list[dict]:
    """The successful uncompressed bare-SpMM records of ``graph`` in the results file."""
    return [r for r in read_records(path) if r.get("mode") == "spmm" and r.get("graph") == graph
            and "error" not in r and r["codec"] == "none"]


def measured_rate(records: list[dict], f: int, threads: int | None = 1) -> float | None:
    """Median local rate (non-zeros x columns / s of the slowest rank) of the records at
    width ``f`` with ``threads`` threads per rank (any thread count when there are none),
    or None when there are no such records at all."""
    recs = [r for r in records if r["f"] == f and r["breakdown"].get("local", 0) > 0
            and r["per_rank"].get("nnz")]
    same = [r for r in recs if r.get("threads_per_rank") == threads]
    rates = [max(r["per_rank"]["nnz"]) * r["f"] / r["breakdown"]["local"]
             for r in (same or recs)]
    return float(np.median(rates)) if rates else None


def compare_runs(A, records: list[dict], partitioner: str, m: Machine,
                 fixed_rate: bool = False) -> list[dict]:
    """One row per record of ``partitioner``: measured and predicted seconds per SpMM and
    whether the measured per-rank bytes equal the prediction. The local rate is the one
    measured at the record's width and threads, unless ``fixed_rate`` (then ``m.rate``)."""
    recs = [r for r in records if r["partitioner"] == partitioner and r["algorithm"] in VOLUMES]
    out = []
    for r in sorted(recs, key=lambda r: (r["f"], r["P"], r["algorithm"], r["c"])):
        layout = build_layout(A, r["P"] // r["c"], partitioner, r.get("seed", 0))
        isz = 8 if r.get("dtype") == "float64" else 4
        vol = predict(r["algorithm"], layout, r["P"], r["c"], r["f"], isz)
        rate = (None if fixed_rate else measured_rate(records, r["f"], r.get("threads_per_rank"))
                ) or m.rate
        t = spmm_time(r["algorithm"], layout, vol, r["P"], r["c"], r["f"], isz,
                      dataclasses.replace(m, rate=rate))
        out.append(dict(P=r["P"], c=r["c"], algorithm=r["algorithm"], f=r["f"],
                        measured=r["seconds"], predicted=t["seconds"],
                        bytes_equal=vol.sent.tolist() == r["per_rank"].get("bytes_sent")))
    return out


def format_compare(rows: list[dict]) -> str:
    """The comparison as a fixed-width table."""
    lines = [f"{'P':>3} {'c':>3} {'algorithm':>13} {'f':>5} {'measured ms':>12} "
             f"{'predicted ms':>13} {'bytes equal':>11}"]
    lines += [f"{r['P']:>3} {r['c']:>3} {r['algorithm']:>13} {r['f']:>5} "
              f"{r['measured'] * 1e3:>12.3f} {r['predicted'] * 1e3:>13.3f} "
              f"{str(r['bytes_equal']):>11}" for r in rows]
    return "\n".join(lines)
