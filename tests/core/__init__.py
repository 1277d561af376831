"""Tests of the top-level modules and the public API (grid, layout, reorder, krylov,
``DistSpMM``)."""
