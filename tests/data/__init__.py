"""Tests of the graphs, their files and loaders (``spmmgnn.data``)."""
