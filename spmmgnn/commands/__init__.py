"""Sub-commands of the ``spmmgnn`` CLI: each module defines ``add_parser(subparsers)``."""
