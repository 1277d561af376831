"""Sub-commands of the ``spmmgnn`` CLI: each module defines ``add_parser(subparsers)``."""

import argparse


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Adds ``(default: X)`` to an option's help unless the help already names its default
    or there is none to show (no value, a flag)."""

    def _get_help_string(self, action) -> str:
        text = action.help or ""
        if "default" in text or action.default in (None, False, argparse.SUPPRESS):
            return text
        return super()._get_help_string(action)
