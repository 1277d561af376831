"""Tests of the repository as a whole: style, types, docs, start-up."""
