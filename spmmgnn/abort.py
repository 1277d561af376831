"""End the whole MPI job when one rank dies of an unhandled Python exception.

(Filled in by the reliability work of issue 12; installed from ``spmmgnn/__init__``.)
"""

from __future__ import annotations


def install_abort_hook() -> None:
    """Install the hook (no-op until implemented)."""
