"""Issue 46, the third campaign: the probes that need several ranks (one launch each)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .mpi import one_line_error, run_cli

TRAIN = ["train", "--csbm-n", "300", "--hidden", "8", "--quiet"]


def test_a_checkpoint_that_does_not_fit_is_one_message_not_one_per_rank(tmp_path):
    ck = tmp_path / "ck.npz"
    proc = run_cli(2, *TRAIN, "--epochs", "1", "--checkpoint", str(ck))
    assert proc.returncode == 0, proc.stderr[-3000:]
    with np.load(ck) as z:
        arrays = {k: z[k] for k in z.files}
    name = next(k for k in arrays if k.startswith("param/"))
    arrays[name] = arrays[name][:1]  # a cut array: the meta still reads
    with open(ck, "wb") as fh:
        np.savez(fh, **arrays)
    assert json.loads(str(arrays["meta"]))["epoch"] == 1
    proc = run_cli(2, *TRAIN, "--epochs", "2", "--checkpoint", str(ck), "--resume")
    one_line_error(proc, f"checkpoint {ck}: checkpoint parameters do not fit the model")
    assert "rank 1" not in proc.stderr and Path(ck).exists()


def test_data_and_metadata_travel_as_buffers_not_pickles():
    """``from_scipy`` (a permuted, uneven partition with an empty block row), ``scatter_rows``,
    ``gather_rows`` and the ``wire`` collectives on 2 and 3 ranks: the results match scipy
    and only scalars went through mpi4py's pickle (before: the partition, the shapes and
    scatter_rows' header were pickled)."""
    from .mpi import run_mpi

    for n in (2, 3):
        proc = run_mpi(n, "wire_cases.py")
        assert proc.stdout.count(": OK (") == n, proc.stdout + proc.stderr[-3000:]


def test_dot_norm_and_gram_make_one_all_reduce_a_call():
    """The per-call cost: the validation of dot / norm / gram travels in the sum's own
    all-reduce (one collective call a call, ``y is x`` or not), counted on 2 and 3 ranks.
    Persistent collectives off: the counter sees each call's ``Allreduce`` by name (a
    persistent request, made once, is started without a call through the communicator)."""
    from .mpi import run_mpi

    for n in (2, 3):
        proc = run_mpi(n, "call_counts.py", env={"SPMMGNN_PERSISTENT": "0"})
        assert proc.stdout.count(": OK") == n, proc.stdout + proc.stderr[-3000:]
