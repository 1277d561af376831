"""Tests of the SpMM families and the row algebra (``spmmgnn.algorithms``)."""
