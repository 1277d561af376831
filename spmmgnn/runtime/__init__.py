"""The process around the numbers: errors and their agreement, metadata collectives without
pickle, signals and aborts, atomic files, threads, numba's lazy kernels, machine probes,
work buffers and communication statistics.
"""
