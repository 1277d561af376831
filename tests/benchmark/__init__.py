"""Tests of the benchmark tools, models and plots (``spmmgnn.benchmark``, ``bench/``)."""
