"""Tests of the local kernels and codecs (``spmmgnn.local``)."""
