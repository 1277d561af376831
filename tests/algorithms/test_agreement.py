"""Ranks that disagree on a call never hang and never get wrong rows (issue 41): for every
algorithm, a ``matmul`` on one rank and a ``matmul_t`` on the other, different ``root=`` or
``side=`` of ``gather_rows`` / ``scatter_rows``, a ``scatter_rows`` meeting a
``gather_rows``, or ``matmul`` meeting ``dot`` (the row algebra's calls too) is one
collective error on every rank, and the operator still multiplies correctly afterwards;
tensors numpy cannot hold (bfloat16, meta) on one rank are one error naming the fix. One
2-rank launch (``tests/algorithms/workers/disagree.py``) runs every case."""

from __future__ import annotations

import pytest

from spmmgnn.algorithms import ALGORITHMS

WORDS = dict(
    matmul_vs_matmul_t="call different methods at the same time (matmul and matmul_t)",
    gather_root="gather_rows: the ranks pass different root= (0 and 1)",
    gather_side="gather_rows: the ranks pass different side= (input and output)",
    scatter_root="scatter_rows: the ranks pass different root= (0 and 1)",
    gather_bad_side="gather_rows: side must be 'input' or 'output', got 'bogus' (rank 1)",
    gather_bad_root="gather_rows: root must be a rank of the grid's 2, got 5 (rank 0)",
    scatter_vs_gather="call different methods at the same time (gather_rows and scatter_rows)",
    matmul_vs_dot="call different methods at the same time (matmul and dot)",
    gram_vs_gather="call different methods at the same time (gather_rows and gram)",
    norm_vs_allreduce="call different methods at the same time (norm and allreduce)",
    bfloat16="matmul: expected float32 or float64, got torch.bfloat16; convert with x.float()",
    meta="gather_rows: a meta tensor has a shape but no values",
)


@pytest.fixture(scope="module")
def disagree(mpi_json):
    return mpi_json(2, "disagree.py", timeout=300)


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_disagreeing_ranks_get_one_collective_error(disagree, algorithm):
    got = disagree["operators"][algorithm]
    for case, words in WORDS.items():
        messages = got["cases"][case]
        assert len(messages) == 2 and messages[0] == messages[1], (case, messages)
        assert messages[0].startswith("collective=True") and words in messages[0], (case,
                                                                                  messages)
    assert got["error"] < 1e-12  # the operator still multiplies right afterwards


def test_bad_edge_index_tensors_and_weights(disagree):
    cases = disagree["operators"]["edge_index"]["cases"]
    words = dict(edge_index_bfloat16="bfloat16 tensor has no numpy equivalent",
                 edge_index_meta="a meta tensor has a shape but no values",
                 num_nodes_1e12="1000000000000-vertex adjacency (num_nodes=1000000000000) "
                                "needs about",
                 negative_gcn="'gcn' normalization is undefined",
                 negative_mean="'mean' normalization is undefined: 1 vertex(es)")
    for case, w in words.items():
        assert all(m and m.startswith("collective=True") and w in m for m in cases[case]), (
            case, cases[case])
    assert "make the edge weights non-negative" in cases["negative_gcn"][0]


def test_weights_near_1e308_normalize_to_finite_values(disagree):
    for kind in ("gcn", "mean", "gcn_block_rows", "mean_block_rows"):
        got = disagree["huge_weights"][kind]
        assert got["finite"] and got["error"] < 1e-15, (kind, got)


def test_bad_data_on_the_block_row_path_and_a_model_too_large(disagree):
    """Every rank reads only its block row of the HDF5 file, yet all get the same line."""
    cases = disagree["operators"]["data"]["cases"]
    words = dict(perm_duplicate=["perm is not a permutation of 0..299", "1 id(s) appear more "
                                 "than once (first: 17)"],
                 perm_1e12=["perm is not a permutation of 0..299", "= 1000000000000"],
                 negative_weights=["'gcn' normalization is undefined", "first vertex 200 with",
                                   "make the edge weights non-negative"],
                 hidden_1e9=["the model (2 layers 8 -> 1000000000 -> 4", "per rank x 2 ranks "
                             "on this node and this node has", "lower --hidden or --layers"])
    for case, ws in words.items():
        assert all(m and m.startswith("collective=True") and all(w in m for w in ws)
                   for m in cases[case]), (case, cases[case])
