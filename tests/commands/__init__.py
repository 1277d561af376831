"""Tests of the command line (``spmmgnn.commands``, ``spmmgnn.cli``)."""
