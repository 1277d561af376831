"""Tests of the layers and models (``spmmgnn.nn``)."""
