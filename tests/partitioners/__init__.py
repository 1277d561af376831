"""Tests of the partitioners and partition metrics (``spmmgnn.partitioners``)."""
