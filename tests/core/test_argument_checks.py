"""The public API checks its arguments (issue 46): a hand-built or odd-typed partition, a
grid shape or grid coordinates that are not integers, a root outside the grid, block sizes
that would wrap, and numpy arrays given to the torch layers are each one ``SpmmgnnError`` that
says what to pass, in one process."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from spmmgnn import SpmmgnnError


def test_a_hand_built_partition_is_checked():
    from spmmgnn import Partition

    with pytest.raises(SpmmgnnError, match="perm is not a permutation"):
        Partition(None, 2, np.array([0, 0, 1, 2]), [0, 2, 4])
    with pytest.raises(SpmmgnnError, match=r"perm must hold the ids 0..3, found range "
                                           r"\[0, 9\]"):
        Partition(None, 2, np.array([0, 1, 2, 9]), [0, 2, 4])
    with pytest.raises(SpmmgnnError, match="perm has 3 entries for n = 4"):
        Partition(None, 2, np.array([0, 1, 2]), [0, 2, 4])
    with pytest.raises(SpmmgnnError, match="parts do not match its perm and offsets"):
        Partition(np.array([0, 0, 0, 1]), 2, np.array([0, 1, 2, 3]), [0, 2, 4])
    with pytest.raises(SpmmgnnError, match="offsets must be k \\+ 1 = 3 non-decreasing"):
        Partition(None, 2, None, [0, 3, 2])
    good = Partition.from_parts([1, 0, 1, 0], 2)
    assert Partition(good.parts, 2, good.perm, good.offsets).perm.tolist() == [1, 3, 0, 2]


@pytest.mark.parametrize("parts", [np.array([0, 1, 0, 1], dtype=complex),
                                   np.array(["0", "1", "0", "1"]),
                                   np.array([True, False, True, False])])
def test_part_vectors_of_other_types_are_one_error(parts):
    from spmmgnn import Partition
    from spmmgnn.layout import resolve_partition

    with pytest.raises(SpmmgnnError, match="a part vector must hold integer block-row ids"):
        Partition.from_parts(parts, 2)
    with pytest.raises(SpmmgnnError, match="a part vector must hold integer block-row ids"):
        resolve_partition(parts, 4, 2)


def test_uint64_block_sizes_do_not_wrap():
    from spmmgnn import Partition

    with pytest.raises(SpmmgnnError, match=f"block sizes sum to {2**64 + 4}, more than any"):
        Partition.from_sizes(np.array([2**63, 2**63, 4], dtype=np.uint64), 4)
    with pytest.raises(SpmmgnnError, match=f"block sizes sum to {2**64 + 1}, more than any"):
        Partition.from_sizes(np.array([2**64 - 1, 2], dtype=np.uint64))
    assert Partition.from_sizes(np.array([1, 3], dtype=np.uint64), 4).offsets.tolist() == [
        0, 1, 4]


@pytest.mark.parametrize("shape", [(True, 2), (None, 2), "1x2", 2, (1 + 0j, 1), ("1", "1"),
                                   (np.True_, 1)])
def test_grid_shapes_that_are_not_integers_are_one_error(shape):
    from mpi4py import MPI

    from spmmgnn import ProcessGrid

    with pytest.raises(SpmmgnnError, match="a grid shape is 2 or 3 positive integers"):
        ProcessGrid(MPI.COMM_SELF, shape=shape)


def test_rank_of_checks_the_coordinates():
    from mpi4py import MPI

    from spmmgnn import ProcessGrid

    grid = ProcessGrid(MPI.COMM_SELF, shape=(1, 1))
    assert grid.rank_of(0, 0) == 0
    for coords in ((5, 5), (0, 1), (-1, 0), (0,), (0, 0, 0), (0.0, 0), (True, 0)):
        with pytest.raises(SpmmgnnError, match="are outside the 1x1 grid"):
            grid.rank_of(*coords)
    with pytest.raises(SpmmgnnError, match="ranks_per_node must be a positive integer below "
                                           "2\\*\\*31"):
        ProcessGrid(MPI.COMM_SELF, ranks_per_node=10**23)


def test_from_scipy_root_outside_the_grid():
    from mpi4py import MPI

    from spmmgnn import DistSpMM, ProcessGrid

    for root in (1, -1, True, 0.0):
        with pytest.raises(SpmmgnnError, match=f"root={root!r} is not a rank of the grid: "
                                               "give a rank in 0..0"):
            DistSpMM.from_scipy(sp.identity(4, format="csr"), ProcessGrid(MPI.COMM_SELF),
                                root=root)


def test_api_misuse_says_what_to_pass():
    import torch
    from mpi4py import MPI

    from spmmgnn import DistSpMM, ProcessGrid
    from spmmgnn.data.pyg import graph_from_pyg
    from spmmgnn.nn import spmm, spmm_t

    op = DistSpMM.from_scipy(sp.identity(4, format="csr"), ProcessGrid(MPI.COMM_SELF))
    x = np.ones((4, 2))
    with pytest.raises(SpmmgnnError, match=r"nn.spmm\(op, x\) takes a torch.Tensor, got "
                                           r"numpy.ndarray: pass torch.from_numpy\(x\)"):
        spmm(op, x)
    with pytest.raises(SpmmgnnError, match=r"nn.spmm_t\(op, y\) takes a torch.Tensor"):
        spmm_t(op, x)
    assert torch.equal(spmm(op, torch.from_numpy(x)), torch.from_numpy(x))
    ei = torch.stack([torch.arange(400), torch.arange(400).roll(1)])
    with pytest.raises(SpmmgnnError, match="x has 397 rows but edge_index names vertex 399: "
                                           "x needs one row per vertex"):
        graph_from_pyg(dict(edge_index=ei, x=torch.ones(397, 3)))
    with pytest.raises(SpmmgnnError, match=r"y has shape \(400, 2\): give one class id per "
                                           r"vertex \(one-hot"):
        graph_from_pyg(dict(edge_index=ei, x=torch.ones(400, 3),
                            y=torch.zeros(400, 2, dtype=torch.long)))
    assert graph_from_pyg(dict(edge_index=ei, y=torch.zeros(400, 1))).labels.shape == (400,)
