"""The bytes of ``oblivious2d``/``oblivious3d`` (``algorithms/summa.py``) that cross between
nodes, per rank, as ``comm_stats()`` splits them (``bytes_sent_by_tier``): every collective
counts what went to (came from) a rank of another node. Predicted from the part sizes, the
block non-zeros and the node of every rank alone; ``volumes.predict`` uses them where
``sparse2d``/``sparse3d`` take SUMMA (``algorithms/grid_route.py``).
"""

from __future__ import annotations

import numpy as np

from ..stages import stage_ranges

INDEX_BYTES = 8   # as summa.INDEX_BYTES: a non-zero travels as two int32 and its value


def summa_inter(sizes: np.ndarray, block_nnz: np.ndarray, shape3: tuple[int, int, int],
                f: int, itemsize: int, node: np.ndarray) -> dict[str, np.ndarray]:
    """Per rank ``sent_inter``, ``received_inter`` (forward) and ``sent_t_inter``,
    ``received_t_inter`` (transpose); ``sizes``: rows of every part (one per rank, square
    A), ``block_nnz[p, q]``: non-zeros of block A_pq, ``node``: the node of every rank."""
    pr, pc, pl = shape3
    P = pr * pc * pl
    r = np.arange(P)
    i, j, l = (r // pl) // pc, (r // pl) % pc, r % pl
    n = sizes.astype(np.int64)
    w = np.diff(stage_ranges(f, pc)).astype(np.int64)          # feature block widths
    fj = w[j]
    grid = r.reshape(pr, pc, pl)
    U = n.reshape(pr, pc, pl).sum(axis=1)                       # U[i, l]
    tiles = np.zeros((pr, pr, pl), dtype=np.int64)              # nnz of A[V_i, U_kl]
    np.add.at(tiles, (i[:, None], i[None, :], l[None, :]), block_nnz)
    tile_bytes = tiles * (INDEX_BYTES + itemsize)
    out = {k: np.zeros(P, dtype=np.int64) for k in
           ("conv_in_s", "conv_in_r", "conv_out_s", "conv_out_r", "a_s", "a_r", "h_s", "h_r",
            "red_s", "red_r", "rs_s", "rs_r", "ag_s", "ag_r")}
    for p in range(P):
        row = grid[i[p], :, l[p]]                # (i, ., l): conversions and tiles
        col = grid[:, j[p], l[p]]                # (., j, l): blocks of H, the reduces
        fib = grid[i[p], j[p], :]                # (i, j, .): the layers
        far_row, far_col, far_fib = (node[row] != node[p], node[col] != node[p],
                                     node[fib] != node[p])
        isz = itemsize
        # to blocks: my rows' feature block q to (i, q, l); theirs of my block back
        out["conv_in_s"][p] = n[p] * w[far_row].sum() * isz
        out["conv_in_r"][p] = n[row][far_row].sum() * fj[p] * isz
        # to rows: the reverse
        out["conv_out_s"][p] = out["conv_in_r"][p]
        out["conv_out_r"][p] = out["conv_in_s"][p]
        for k in range(pr):                      # the stages
            root = row[k % pc]
            nb = int(tile_bytes[i[p], k, l[p]])
            if root == p:
                out["a_s"][p] += nb * int(far_row.sum())
            elif node[root] != node[p]:
                out["a_r"][p] += nb
            hb = int(U[k, l[p]]) * int(fj[p]) * isz   # H[U_kl, F_j], and the reduce's part
            if col[k] == p:
                out["h_s"][p] += hb * int(far_col.sum())
                out["red_r"][p] += hb * int(far_col.sum())
            elif node[col[k]] != node[p]:
                out["h_r"][p] += hb
                out["red_s"][p] += hb
        if pl > 1:
            share = U[i[p], :] * fj[p] * isz            # each layer's rows of my block
            out["rs_s"][p] = share[far_fib].sum()
            out["rs_r"][p] = share[l[p]] * int(far_fib.sum())
            out["ag_s"][p] = out["rs_r"][p]
            out["ag_r"][p] = out["rs_s"][p]
    o = out
    return {"sent_inter": o["conv_in_s"] + o["a_s"] + o["h_s"] + o["rs_s"] + o["conv_out_s"],
            "received_inter": o["conv_in_r"] + o["a_r"] + o["h_r"] + o["rs_r"]
            + o["conv_out_r"],
            "sent_t_inter": o["conv_in_s"] + o["ag_s"] + o["a_s"] + o["red_s"] + o["conv_out_s"],
            "received_t_inter": o["conv_in_r"] + o["ag_r"] + o["a_r"] + o["red_r"]
            + o["conv_out_r"]}
