"""Sparsity-oblivious 3D SpMM on a pr x pc x pl grid: CAGNET's Split-3D-SpMM
(``gcn_distr_3d.py``, ``split3dspmm_sparse``).

The pl layers split the inner dimension (layer l multiplies the columns owned in layer l);
each layer runs ``oblivious2d``'s SUMMA on its pr x pc grid, and the layers' partial results
are summed across the fiber (i, j, .) by a reduce-scatter. Per call a rank receives about
nnz / (pr pl) non-zeros and n f / (pc pl) values of H, plus the reduce-scatter of its share
of Z. See ``summa.py`` for the layout conversions.
"""

from __future__ import annotations

from .oblivious2d import Oblivious2D


class Oblivious3D(Oblivious2D):
    name = "oblivious3d"
    grid_kinds = ("3d",)
