"""``Graph``: a CSR adjacency with optional node features, labels and split masks."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from ..runtime.errors import SpmmgnnError
from ..runtime.jit import njit, prange


@dataclass
class Graph:
    adj: sp.csr_array                   # n x n; row = target, column = source
    features: np.ndarray | None = None  # n x f float32
    labels: np.ndarray | None = None    # n int64, -1 = unlabelled
    masks: dict[str, np.ndarray] = field(default_factory=dict)  # train / val / test bool
    num_classes: int = 0
    directed: bool = False
    name: str = "graph"

    @property
    def n(self) -> int:
        return int(self.adj.shape[0])

    def validate(self, feature_values: bool = True) -> Graph:
        """Raise SpmmgnnError on inconsistent shapes, non-integer labels or non-finite values
        (of the features only when ``feature_values``: training checks them rank by rank)."""
        n = self.n
        if self.adj.shape != (n, n):
            raise SpmmgnnError(f"{self.name}: adjacency must be square, got {self.adj.shape}")
        if self.adj.nnz and not np.all(np.isfinite(self.adj.data)):
            raise SpmmgnnError(f"{self.name}: adjacency has NaN or Inf values")
        if self.features is not None:
            if self.features.ndim != 2 or self.features.shape[0] != n:
                raise SpmmgnnError(f"{self.name}: features must be {n} x f, got "
                                   f"{self.features.shape}")
            if self.features.shape[1] == 0:
                raise SpmmgnnError(f"{self.name}: features have 0 columns (shape "
                                   f"{self.features.shape}); give at least one feature, or "
                                   "none at all")
            if feature_values and not np.all(np.isfinite(self.features)):
                raise SpmmgnnError(f"{self.name}: features have NaN or Inf values")
        if self.labels is not None:
            if self.labels.shape != (n,):
                hint = ("; one-hot or multi-column labels: pass one class id per vertex "
                        "(argmax)" if self.labels.ndim == 2 else "")
                raise SpmmgnnError(f"{self.name}: labels must be one class id per vertex, "
                                   f"shape ({n},), got {self.labels.shape}{hint}")
            if self.labels.dtype.kind not in "iu":
                raise SpmmgnnError(f"{self.name}: labels must be integers (class ids, -1 = "
                                   f"unlabelled), got {self.labels.dtype}")
        for k, m in self.masks.items():
            if m.shape != (n,):
                raise SpmmgnnError(f"{self.name}: mask {k!r} must have length {n}")
        return self

    def permuted(self, perm: np.ndarray) -> Graph:
        """The graph relabelled so that new vertex i is old vertex perm[i]."""
        return Graph(
            adj=permute_csr(self.adj, perm),
            features=None if self.features is None else self.features[perm],
            labels=None if self.labels is None else self.labels[perm],
            masks={k: m[perm] for k, m in self.masks.items()},
            num_classes=self.num_classes, directed=self.directed, name=self.name)


@njit(cache=True, parallel=True)
def _permute_rows(indptr, indices, data, perm, inv, new_indptr, new_indices, new_data):
    for i in prange(perm.size):
        src = perm[i]
        out = new_indptr[i]
        for j in range(indptr[src], indptr[src + 1]):
            new_indices[out] = inv[indices[j]]
            new_data[out] = data[j]
            out += 1


def permute_csr(A, perm: np.ndarray) -> sp.csr_array:
    """``A[perm][:, perm]`` (new vertex i is old vertex ``perm[i]``) in one pass: the result
    is the only new copy of the graph (scipy's two fancy indexings make two, and the column
    one allocates more on the way); int32 indices stay int32. Rows are not re-sorted."""
    A = sp.csr_array(A)
    n = A.shape[0]
    perm = np.asarray(perm, dtype=np.int64)
    inv = np.empty(n, dtype=A.indices.dtype)
    inv[perm] = np.arange(n, dtype=A.indices.dtype)
    # scipy keeps indptr and indices of one dtype: int32 indices need an int32 indptr, else
    # it would copy them to int64
    small = A.indices.dtype == np.int32 and A.nnz < 2**31 - 1
    indptr = np.zeros(n + 1, dtype=np.int32 if small else np.int64)
    np.cumsum(np.diff(A.indptr)[perm], out=indptr[1:])
    indices = np.empty(A.nnz, dtype=A.indices.dtype)
    data = np.empty(A.nnz, dtype=A.data.dtype)
    _permute_rows(A.indptr, A.indices, A.data, perm, inv, indptr, indices, data)
    return sp.csr_array((data, indices, indptr), shape=A.shape)
