"""Tests of the runtime: threads, faults, agreement, outputs, wire (``spmmgnn.runtime``)."""
