"""Graph data: the project's HDF5 format, loaders and generators."""
