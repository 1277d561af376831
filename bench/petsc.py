"""sparse1d against PETSc's ``MatMatMult`` (MPIAIJ x MPIDense) on the same matrix, same rows
per rank, same P, one thread per rank, float64: the distributed SpMM of a mature library.

    python -m bench.petsc -P 2 --n 150000 --nnz-per-row 10 -f 128

PETSc comes from Debian (``apt-get install python3-petsc4py``: PETSc with its OpenMPI, for
the system ``/usr/bin/python3``), so the two sides run under their own MPI: this script
writes the matrix as raw CSR arrays, runs a PETSc worker under ``/usr/bin/mpiexec`` and a
spmmgnn worker under this environment's ``mpiexec``, and compares the best times. PETSc's
product is stock (default options); the row blocks are the same near-equal ranges. The
workers run this file by its path (the system Python has neither ``bench`` nor
``spmmgnn``): it imports only numpy at the top.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def rows_of(n: int, P: int, r: int) -> tuple[int, int]:
    """Near-equal contiguous rows of rank r (the first n % P ranks one more), as both use."""
    base, extra = divmod(n, P)
    lo = r * base + min(r, extra)
    return lo, lo + base + (r < extra)


def worker_petsc(args) -> None:
    from petsc4py import PETSc  # Debian's system python has no mpi4py: PETSc's comm

    comm = PETSc.COMM_WORLD
    z = np.load(args.matrix, allow_pickle=False)
    n, f = int(z["n"]), args.f
    lo, hi = rows_of(n, comm.getSize(), comm.getRank())
    indptr = z["indptr"][lo:hi + 1] - z["indptr"][lo]
    cols = z["indices"][z["indptr"][lo]:z["indptr"][hi]]
    vals = z["data"][z["indptr"][lo]:z["indptr"][hi]]
    A = PETSc.Mat().createAIJ(size=((hi - lo, n), (hi - lo, n)),
                              csr=(indptr.astype(PETSc.IntType), cols.astype(PETSc.IntType),
                                   vals.astype(PETSc.ScalarType)), comm=PETSc.COMM_WORLD)
    A.assemble()
    x = np.random.default_rng(comm.getRank()).standard_normal((hi - lo, f))
    B = PETSc.Mat().createDense(size=((hi - lo, n), (PETSc.DECIDE, f)),
                                array=np.asfortranarray(x), comm=PETSc.COMM_WORLD)
    B.assemble()
    C = A.matMult(B)  # symbolic + numeric once; the loop reuses C (numeric only)
    times = []
    for _ in range(args.repeat):
        comm.barrier()
        t0 = time.perf_counter()
        A.matMult(B, C)
        comm.barrier()
        times.append(time.perf_counter() - t0)
    if comm.getRank() == 0:
        version = ".".join(map(str, PETSc.Sys.getVersion()))
        Path(args.result).write_text(json.dumps(dict(system="PETSc MatMatMult (stock)",
                                                     version=version, seconds=min(times))))


def worker_ours(args) -> None:
    import scipy.sparse as sp
    from mpi4py import MPI

    import spmmgnn

    comm = MPI.COMM_WORLD
    spmmgnn.set_threads(1)
    A = None
    if comm.rank == 0:
        z = np.load(args.matrix, allow_pickle=False)
        n = int(z["n"])
        A = sp.csr_array((z["data"], z["indices"], z["indptr"]), shape=(n, n))
    op = spmmgnn.DistSpMM.from_scipy(A, algorithm=args.algorithm, validate=False)
    x = np.random.default_rng(comm.rank).standard_normal((op.n_local_in, args.f))
    op.matmul(x)
    op.reset_stats()
    times = []
    for _ in range(args.repeat):
        comm.Barrier()
        t0 = time.perf_counter()
        op.matmul(x)
        comm.Barrier()
        times.append(time.perf_counter() - t0)
    st = op.comm_stats()
    parts = comm.gather({k: st[k] / args.repeat for k in ("seconds_multiply", "seconds_exchange",
                                                          "seconds_exchange_hidden",
                                                          "bytes_sent")}, root=0)
    if comm.rank == 0:
        Path(args.result).write_text(json.dumps(dict(system=f"spmmgnn {args.algorithm}",
                                                     seconds=min(times), per_rank=parts)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", choices=["petsc", "ours"], help=argparse.SUPPRESS)
    ap.add_argument("--matrix", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    ap.add_argument("-P", type=int, default=2)
    ap.add_argument("--n", type=int, default=150_000)
    ap.add_argument("--nnz-per-row", type=int, default=10)
    ap.add_argument("-f", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--algorithm", default="sparse1d")
    ap.add_argument("--petsc-python", default="/usr/bin/python3")
    ap.add_argument("--petsc-mpiexec", default="/usr/bin/mpiexec")
    ap.add_argument("--petsc-dir", default="/usr/lib/petscdir/petsc3.18/x86_64-linux-gnu-real",
                    help="PETSC_DIR of Debian's PETSc (where its petsc4py lives)")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "petsc"))
    args = ap.parse_args()
    if args.worker:
        (worker_petsc if args.worker == "petsc" else worker_ours)(args)
        return
    import scipy.sparse as sp

    from spmmgnn.benchmark.harness import mpiexec
    from spmmgnn.benchmark.tables import publish

    for tool in (args.petsc_mpiexec, args.petsc_python):
        if not Path(tool).exists():
            raise SystemExit(f"error: {tool} not found: PETSc's side needs Debian's "
                             "python3-petsc4py (apt-get install python3-petsc4py) or "
                             "--petsc-mpiexec / --petsc-python")
    rng = np.random.default_rng(0)
    n = args.n
    A = sp.random(n, n, density=args.nnz_per_row / n, random_state=rng, format="csr")
    A.sum_duplicates()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        mat = Path(tmp) / "A.npz"
        np.savez(mat, n=n, indptr=A.indptr.astype(np.int64), indices=A.indices.astype(np.int64),
                 data=A.data)
        common = [str(Path(__file__)), "--matrix", str(mat), "-f", str(args.f), "--repeat",
                  str(args.repeat), "--algorithm", args.algorithm]
        env = dict(OMP_NUM_THREADS="1", SPMMGNN_THREADS="1", PATH="/usr/bin:/bin",
                   PETSC_DIR=args.petsc_dir, NUMBA_CACHE_DIR=str(Path(tmp) / "numba"))
        runs = [("petsc", [args.petsc_mpiexec, "--allow-run-as-root", "--oversubscribe", "-n",
                           str(args.P), args.petsc_python]),
                ("ours", [mpiexec(), "-n", str(args.P), sys.executable])]
        for kind, launcher in runs:
            result = Path(tmp) / f"{kind}.json"
            proc = subprocess.run([*launcher, *common, "--worker", kind, "--result",
                                   str(result)], capture_output=True, text=True,
                                  env=dict(env, HOME=tmp))
            if proc.returncode != 0:
                raise SystemExit(f"{kind} failed:\n{proc.stderr[-3000:]}")
            rows.append(json.loads(result.read_text()))
            print(f"{rows[-1]['system']:32s} {rows[-1]['seconds'] * 1e3:8.2f} ms", flush=True)
    ratio = rows[1]["seconds"] / rows[0]["seconds"]
    print(f"spmmgnn / PETSc = {ratio:.2f}")
    payload = dict(n=n, nnz=int(A.nnz), f=args.f, P=args.P, repeat=args.repeat, rows=rows,
                   ratio=ratio)
    publish(args.out, payload, render)


def render(data: dict) -> str:
    from spmmgnn.benchmark.tables import md_table

    n = data["n"]
    return "\n".join([
        f"Uniform random {n:,} x {n:,}, {data['nnz']:,} non-zeros, X with {data['f']} columns, "
        f"float64, P = {data['P']}, 1 thread per rank, same near-equal row blocks, best of "
        f"{data['repeat']}.", "",
        *md_table(["system", "ms per product"],
                  [[f"{r['system']}{' ' + r['version'] if 'version' in r else ''}",
                    f"{r['seconds'] * 1e3:.2f}"] for r in data["rows"]], "lr"),
        "", f"spmmgnn / PETSc = {data['ratio']:.2f}", "",
        "spmmgnn per rank and call (mean): " + "; ".join(
            f"rank {i}: multiply {p['seconds_multiply'] * 1e3:.1f} ms, exposed exchange "
            f"{p['seconds_exchange'] * 1e3:.1f} ms, in flight while multiplying "
            f"{p['seconds_exchange_hidden'] * 1e3:.1f} ms, sent {p['bytes_sent'] / 1e6:.1f} MB"
            for i, p in enumerate(data["rows"][1]["per_rank"]))]) + "\n"


if __name__ == "__main__":
    main()
