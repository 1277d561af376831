"""The distributed SpMM algorithms, one module per paper algorithm, and their registry.

``ALGORITHMS`` maps each name to its class; it is filled here, on import, from the explicit
table below (``spmmgnn`` imports this package, so it is complete after ``import spmmgnn``).
Shared pieces: ``base`` (layouts, rows in/out, validation, statistics), ``ghost`` (the
sparsity-aware owned/ghost product with its halo plan), ``block_broadcast`` (the oblivious
stage loop), ``replication`` (1.5D stages and the all-reduce across replicas), ``tiles`` (where A
lives on a 2D/3D grid), ``expand_fold`` (the sparse 2D tile product), ``summa`` (CAGNET's
2D/3D stage loop) and ``plexus3d`` (Plexus's 3D SpMM, its own block layout).
"""

from .base import ALGORITHMS, DistSpMM
from .featureparallel import FeatureParallel
from .oblivious1d import Oblivious1D
from .oblivious2d import Oblivious2D
from .oblivious3d import Oblivious3D
from .oblivious15d import Oblivious15D
from .plexus3d import Plexus3D
from .prepost1d import PrePost1D
from .sparse1d import Sparse1D
from .sparse2d import Sparse2D
from .sparse3d import Sparse3D
from .sparse15d import Sparse15D

ALGORITHMS.update({cls.name: cls for cls in (Oblivious1D, Sparse1D, PrePost1D, FeatureParallel,
                                             Oblivious15D, Sparse15D, Oblivious2D, Sparse2D,
                                             Oblivious3D, Sparse3D, Plexus3D)})

__all__ = ["ALGORITHMS", "DistSpMM", "FeatureParallel", "Oblivious15D", "Oblivious1D",
           "Oblivious2D", "Oblivious3D", "Plexus3D", "PrePost1D", "Sparse15D", "Sparse1D",
           "Sparse2D", "Sparse3D"]
