"""Tests of the backends and the device path (``spmmgnn.backend``)."""
