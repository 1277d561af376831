"""The metadata of the API's collectives travels as buffers (``spmmgnn.runtime.wire``), not
as pickles, on real MPI ranks (issue 46)."""

from __future__ import annotations

from ..mpi import run_mpi


def test_data_and_metadata_travel_as_buffers_not_pickles():
    """``from_scipy`` (a permuted, uneven partition with an empty block row), ``scatter_rows``,
    ``gather_rows`` and the ``wire`` collectives on 2 and 3 ranks: the results match scipy
    and only scalars went through mpi4py's pickle (before: the partition, the shapes and
    scatter_rows' header were pickled)."""
    for n in (2, 3):
        proc = run_mpi(n, "wire_cases.py")
        assert proc.stdout.count(": OK (") == n, proc.stdout + proc.stderr[-3000:]
