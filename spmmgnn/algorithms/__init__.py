"""One module per distributed SpMM algorithm; importing registers them by name."""

from . import oblivious1d, oblivious15d, sparse1d, sparse15d  # noqa: F401
