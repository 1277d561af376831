"""Codec throughput and end-to-end SpMM time per codec.

    mpiexec -n 4 python -m bench.codecs [--out bench/results/codecs.json]

Part 1 (rank 0): quantize+pack and unpack+dequantize throughput in GB/s of float32 input, per
codec, next to a plain memcpy of the same buffer in the same run. Part 2 (all ranks, P > 1):
sparse1d time per SpMM and bytes per rank with each codec, ratios vs uncompressed.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from mpi4py import MPI

from bench import RESULTS
from spmmgnn import DistSpMM, ProcessGrid, default_threads, set_threads
from spmmgnn.benchmark.harness import best_time, machine, write_json
from spmmgnn.data.generators import rmat
from spmmgnn.local.codecs import CODECS

NO_INDEX = np.zeros(0, dtype=np.int64)


def throughput(rows: int, f: int, repeat: int) -> list[dict]:
    x = np.random.default_rng(0).standard_normal((rows, f)).astype(np.float32)
    dst = np.empty_like(x)
    copy = best_time(lambda: np.copyto(dst, x), repeat)["min"]
    out = [dict(codec="memcpy", encode_gbs=x.nbytes / copy / 1e9, decode_gbs=None,
                roundtrip_gbs=x.nbytes / copy / 1e9, ratio=1.0)]
    for name, codec in CODECS.items():
        buf = np.empty((rows, codec.row_bytes(f)), dtype=np.uint8)
        enc = best_time(lambda c=codec, b=buf: c.encode(x, NO_INDEX, b, 1), repeat)["min"]
        dec = best_time(lambda c=codec, b=buf: c.decode(b, dst, NO_INDEX, False), repeat)["min"]
        out.append(dict(codec=name, encode_gbs=x.nbytes / enc / 1e9,
                        decode_gbs=x.nbytes / dec / 1e9, roundtrip_gbs=x.nbytes / (enc + dec) / 1e9,
                        ratio=x.nbytes / buf.nbytes, vs_memcpy=copy / (enc + dec)))
        print(f"{name:>9}: encode {out[-1]['encode_gbs']:6.2f} GB/s  decode "
              f"{out[-1]['decode_gbs']:6.2f} GB/s  ({out[-1]['ratio']:.1f}x smaller; memcpy "
              f"{x.nbytes / copy / 1e9:.2f} GB/s)", flush=True)
    return out


def spmm_per_codec(comm, args) -> list[dict]:
    A = rmat(args.scale, args.edge_factor, seed=1) if comm.rank == 0 else None
    X = (np.random.default_rng(1).standard_normal((A.shape[0], args.features))
         .astype(np.float32) if comm.rank == 0 else None)
    grid = ProcessGrid(comm)
    rows = []
    for name in [None, *CODECS]:
        op = DistSpMM.from_scipy(A, grid, algorithm="sparse1d", codec=name, validate=False)
        x = op.scatter_rows(X)
        op.matmul(x)
        op.reset_stats()
        comm.Barrier()
        t0 = time.perf_counter()
        for _ in range(args.repeat):
            op.matmul(x)
        comm.Barrier()
        sec = (time.perf_counter() - t0) / args.repeat
        st = comm.gather(op.comm_stats(), root=0)
        if comm.rank == 0:
            rows.append(dict(codec=name or "none", seconds_per_spmm=sec,
                             max_bytes_sent=max(s["bytes_sent"] for s in st) / args.repeat,
                             max_codec_s=max(s["seconds_codec"] for s in st) / args.repeat,
                             max_exchange_s=max(s["seconds_exchange"] for s in st) / args.repeat))
            print(f"P={comm.size} {rows[-1]['codec']:>9}: {sec * 1e3:7.2f} ms/SpMM, max sent "
                  f"{rows[-1]['max_bytes_sent'] / 1e6:.2f} MB", flush=True)
    if rows:
        base = rows[0]
        for r in rows:
            r["time_vs_none"] = r["seconds_per_spmm"] / base["seconds_per_spmm"]
            r["bytes_vs_none"] = r["max_bytes_sent"] / max(1.0, base["max_bytes_sent"])
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("-f", "--features", type=int, default=128)
    ap.add_argument("--scale", type=int, default=16)
    ap.add_argument("--edge-factor", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--out", default=str(RESULTS / "codecs.json"))
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    threads = set_threads(args.threads or default_threads(comm))
    tp = throughput(args.rows, args.features, args.repeat) if comm.rank == 0 else None
    spmm = spmm_per_codec(comm, args) if comm.size > 1 else []
    if comm.rank == 0:
        path = write_json(args.out, dict(machine=machine(), threads_per_rank=threads,
                                         rows=args.rows, f=args.features, throughput=tp,
                                         spmm=spmm))
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
