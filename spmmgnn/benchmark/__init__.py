"""Comparative benchmarks: sweeps that append JSON lines, reports, and an alpha-beta scaling
model whose per-rank volumes are exact (``volumes``)."""
