"""Pieces several sub-commands share: the argument parser class and ``--plugins``."""

from __future__ import annotations

import argparse

from ..core.plugins import load_plugins
from .main import CliUsageError

__all__ = ["CommandParser", "add_plugins_option", "load_cli_plugins"]


class CommandParser(argparse.ArgumentParser):
    """A sub-command's parser: errors raise :class:`CliUsageError` (exit status 2)."""

    def __init__(self, name: str | None = None, **kwargs):
        if name is not None:  # a sub-command; argparse builds nested parsers with their own prog
            kwargs["prog"] = f"modforge {name}"
        super().__init__(**kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        if message.startswith("unrecognized arguments:"):
            message += self._suggest(message.split(":", 1)[1].split())
        raise CliUsageError(f"{self.prog}: {message}")

    def _suggest(self, tokens: list[str]) -> str:
        import difflib

        known = [s for s in self._option_string_actions if s.startswith("--")]
        hints = []
        for token in tokens:
            if token.startswith("--"):
                close = difflib.get_close_matches(token.split("=", 1)[0], known, n=1, cutoff=0.6)
                if close:
                    hints.append(f"{token} → {close[0]}?")
        return f" (did you mean: {'; '.join(hints)})" if hints else ""


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


def add_checkpoint_option(parser: argparse.ArgumentParser) -> None:
    """``--checkpoint best|last``: which checkpoint of a run folder a command uses."""
    parser.add_argument(
        "--checkpoint",
        choices=("best", "last"),
        default="best",
        help="which checkpoint of a run folder (default: best, else last)",
    )


def load_cli_plugins(specs: list[str]) -> list[str]:
    """Import ``--plugins`` (the user vouches for them); return the modules among them as
    plug-in entries (files and package folders as absolute paths; a plain folder imports
    nothing, it only vouches for the files in it, so it is no entry)."""
    import os

    modules = load_plugins(specs, origin="--plugins")
    return [os.path.abspath(s) if s.endswith(".py") or os.path.isdir(s) else s
            for s, module in zip(specs, modules, strict=True) if module is not None]  # fmt: skip
