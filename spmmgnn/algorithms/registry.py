"""The registry of algorithms (``ALGORITHMS``: name -> ``DistSpMM`` subclass, filled by the
package's ``__init__``) and what is said about them by name: the grid an algorithm needs,
and the kernels its products ran."""

from __future__ import annotations

ALGORITHMS: dict[str, type] = {}


def grid_hint(cls: type, grid) -> str:
    """How to run ``cls`` (an algorithm class): the grid it needs, or the algorithms
    ``grid`` (a ``ProcessGrid``) runs."""
    kinds = cls.grid_kinds
    if "2d" in kinds or "3d" in kinds:
        n = 2 if "2d" in kinds else 3
        return (f"build the grid with shape=({', '.join(['pr', 'pc', 'pl'][:n])}) "
                f"(--grid {'x'.join(['2'] * n)} on the command line)")
    others = sorted(name for name, c in ALGORITHMS.items() if grid.kind in c.grid_kinds)
    if grid.kind == "1.5d":
        return f"use replication=1 (--replication 1), or one of {others} for c > 1"
    return f"use replication=c or no grid shape, or one of {others} on this grid"


def kernel_counts(choices: list[dict]) -> dict[str, int]:
    """``{"A x unrolled (measured)": 2, ...}``: how many (block, width) products ran each
    variant, and how it was chosen."""
    counts: dict[str, int] = {}
    for c in choices:
        key = f"{c['op']} {c['variant']} ({c['source']})"
        counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items()))
