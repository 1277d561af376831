"""Run ``spmmgnn`` with a file-size limit (``ulimit -f``), set after MPI started (its shared
memory files would hit the limit otherwise): writes beyond LIMIT bytes fail with EFBIG, as
on a full disk (Python ignores SIGXFSZ).

Usage: python fsize_cli.py LIMIT COMMAND [ARGS...]
"""

from __future__ import annotations

import resource
import sys

from mpi4py import MPI  # noqa: F401  (MPI starts before the limit is set)

from spmmgnn.cli import main

if __name__ == "__main__":
    limit = int(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    sys.exit(main(sys.argv[2:]))
