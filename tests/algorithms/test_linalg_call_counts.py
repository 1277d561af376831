"""The per-call cost of the row algebra (``algorithms/linalg.py``, issue 46): the validation
of dot / norm / gram travels in the sum's own all-reduce, one collective call a call, under
real ``mpiexec`` (tests/algorithms/workers/call_counts.py)."""

from __future__ import annotations

from ..mpi import run_mpi


def test_dot_norm_and_gram_make_one_all_reduce_a_call():
    """The per-call cost: the validation of dot / norm / gram travels in the sum's own
    all-reduce (one collective call a call, ``y is x`` or not), counted on 2 and 3 ranks.
    Persistent collectives off: the counter sees each call's ``Allreduce`` by name (a
    persistent request, made once, is started without a call through the communicator)."""
    for n in (2, 3):
        proc = run_mpi(n, "call_counts.py", env={"SPMMGNN_PERSISTENT": "0"})
        assert proc.stdout.count(": OK") == n, proc.stdout + proc.stderr[-3000:]
