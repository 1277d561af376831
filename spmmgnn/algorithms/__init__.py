"""One module per distributed SpMM algorithm; importing registers them by name."""

from . import oblivious1d, sparse1d  # noqa: F401
