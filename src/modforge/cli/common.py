"""Pieces several sub-commands share: the argument parser class and ``--plugins``."""

from __future__ import annotations

import argparse

from ..core.plugins import load_plugins
from .main import CliUsageError

__all__ = ["CommandParser", "add_plugins_option", "load_cli_plugins"]


class CommandParser(argparse.ArgumentParser):
    """A sub-command's parser: errors raise :class:`CliUsageError` (exit status 2)."""

    def __init__(self, name: str, **kwargs):
        super().__init__(prog=f"modforge {name}", **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        raise CliUsageError(f"{self.prog}: {message}")


def add_plugins_option(parser: argparse.ArgumentParser) -> None:
    """``--plugins FILE_OR_MODULE ...`` (repeatable), imported before anything is looked up."""
    parser.add_argument(
        "--plugins",
        nargs="+",
        action="extend",
        default=[],
        metavar="FILE_OR_MODULE",
        help="plug-in modules or .py files to import first (their parts become available)",
    )


def load_cli_plugins(specs: list[str]) -> list[str]:
    """Import ``--plugins``; return them as plug-in entries (files made absolute)."""
    import os

    load_plugins(specs, origin="--plugins")
    return [os.path.abspath(s) if s.endswith(".py") else s for s in specs]
