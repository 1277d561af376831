"""What one rank computes alone: the numba kernels, the local CSR blocks, the codecs and
the stochastic quantizer, and the counter-based hashes they draw from.
"""
