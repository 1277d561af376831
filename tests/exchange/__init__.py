"""Tests of the row exchanges (``spmmgnn.exchange``)."""
