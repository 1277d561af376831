"""MPI worker: faults during training (see tests/runtime/test_faults.py).

Usage:
  python fault_train.py raise EPOCH RANK
      Builds a small CSBM graph with ``distribute_graph`` and trains it with ``Trainer`` (no
      command line around it, so only the abort hook can end the job): rank RANK raises
      ``RuntimeError("training bug on purpose at epoch EPOCH")`` in the ``on_epoch_end``
      callback of ``Trainer.fit`` at epoch EPOCH while the other ranks go on to the next epoch.
  python fault_train.py cli train [train flags...]
      ``spmmgnn train`` through ``spmmgnn.cli.main`` (its signal and error handling included)
      with test hooks read from the environment:
      SPMMGNN_TEST_PID_DIR      each rank writes its pid to DIR/rank<r>.pid before training;
      SPMMGNN_TEST_EPOCH_SLEEP  seconds every rank sleeps at the end of each epoch (after the
                                checkpoint is written), so a test can interrupt it mid-run.
      The hooks do not change the numbers: a run killed here resumes like the plain CLI.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from mpi4py import MPI


def raise_in_training(epoch_fail: int, rank_fail: int) -> None:
    from spmmgnn import ProcessGrid, install_abort_hook
    from spmmgnn.data.csbm import csbm
    from spmmgnn.training import TrainConfig, Trainer, distribute_graph

    install_abort_hook()  # as docs/failures.md tells a script run under mpiexec
    comm = MPI.COMM_WORLD
    grid = ProcessGrid(comm)
    graph = csbm(n=600, seed=1) if comm.rank == 0 else None
    data = distribute_graph(graph, grid, "gcn")
    trainer = Trainer(data, TrainConfig(epochs=8, hidden=8, progress=False))

    def on_epoch_end(epoch, row, trainer):
        if epoch == epoch_fail and comm.rank == rank_fail:
            raise RuntimeError(f"training bug on purpose at epoch {epoch}")

    trainer.fit(on_epoch_end=on_epoch_end)
    print(f"rank {comm.rank}: training finished", flush=True)


def cli_with_hooks(argv: list[str]) -> int:
    from spmmgnn.commands import train

    pid_dir = os.environ.get("SPMMGNN_TEST_PID_DIR")
    pause = float(os.environ.get("SPMMGNN_TEST_EPOCH_SLEEP", "0"))
    original = train.run

    def on_epoch_end(epoch, row, trainer):
        if pause > 0:
            time.sleep(pause)

    def run(args, _on_epoch_end=None):
        if pid_dir:
            Path(pid_dir).mkdir(parents=True, exist_ok=True)
            Path(pid_dir, f"rank{MPI.COMM_WORLD.rank}.pid").write_text(str(os.getpid()))
        return original(args, on_epoch_end=on_epoch_end)

    train.run = run  # add_parser binds ``run`` when build_parser() is called by main
    from spmmgnn.cli import main

    return main(argv)


if __name__ == "__main__":
    if sys.argv[1] == "raise":
        raise_in_training(int(sys.argv[2]), int(sys.argv[3]))
    elif sys.argv[1] == "cli":
        sys.exit(cli_with_hooks(sys.argv[2:]))
    else:
        raise SystemExit(f"unknown mode {sys.argv[1]!r}")
