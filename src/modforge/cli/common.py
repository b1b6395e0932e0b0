"""Pieces several sub-commands share: the argument parser class, ``--plugins``, ``--checkpoint``,
``KEY=VALUE`` option lists, ``--run-dir`` and ``--print-config``."""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from typing import Any

from ..core.plugins import load_plugins
from .main import CliUsageError

__all__ = [
    "CommandParser",
    "add_checkpoint_option",
    "add_key_values_option",
    "add_plugins_option",
    "add_run_dir_option",
    "key_values",
    "load_cli_plugins",
    "positive_int",
    "printed_config",
    "split_plugin_values",
    "suggest_flag",
]


class CommandParser(argparse.ArgumentParser):
    """A sub-command's parser: errors raise :class:`CliUsageError` (exit status 2), unknown
    flags get the closest real flag as a hint, flags are never abbreviated, and ``--plugins``
    stops taking values at the first one that is not a plug-in."""

    def __init__(self, name: str | None = None, **kwargs):
        if name is not None:  # a sub-command; argparse builds nested parsers with their own prog
            kwargs["prog"] = f"modforge {name}"
        # no abbreviations: with part flags appearing as parts are chosen, `--ep` or `--chan` would
        # mean different flags in different configs; a mistyped flag gets a suggestion instead
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(**kwargs)

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        if args is not None:
            args = split_plugin_values(list(args))
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> None:  # type: ignore[override]
        if message.startswith("unrecognized arguments:"):
            message += self._suggest(message.split(":", 1)[1].split())
        raise CliUsageError(f"{self.prog}: {message}")

    def _suggest(self, tokens: list[str]) -> str:
        """`` (did you mean: --lrr → --lr?)`` for unknown flags close to one of this command's
        own flags; nothing when none is close (a wrong hint is worse than none)."""
        hints = []
        for token in tokens:
            if token.startswith("--"):
                close = suggest_flag(token.split("=", 1)[0], self._option_string_actions)
                if close:
                    hints.append(f"{token} → {close}?")
        return f" (did you mean: {'; '.join(hints)})" if hints else ""


def suggest_flag(typed: str, known: Iterable[str]) -> str | None:
    """The flag among ``known`` closest to ``typed`` (``--lrr`` → ``--lr``), or ``None``.

    Names are compared without their dashes, so the shared ``--`` does not make ``--lr`` look
    like ``--pool``; ``--help`` is never suggested, and ``--no-X`` only for ``--no-…``."""
    import difflib

    name = typed.lstrip("-")
    candidates = {
        flag.lstrip("-"): flag
        for flag in known
        if flag.startswith("--") and flag != "--help" and flag.startswith("--no-") == typed.startswith("--no-")
    }
    close = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.75 if len(name) <= 4 else 0.7)
    return candidates[close[0]] if close else None


def _plugin_like(token: str) -> bool:
    """Whether a token after ``--plugins``'s first value is another plug-in: a ``.py`` file,
    a folder holding Python files, or an importable top-level module (found, not imported)."""
    import importlib.util
    import os

    if token.startswith("-") or "=" in token or token.endswith((".yaml", ".yml")):
        return False
    if token.endswith(".py"):
        return True
    if os.path.isdir(token):
        return any(name.endswith(".py") for name in os.listdir(token))
    if os.path.exists(token) or not all(part.isidentifier() for part in token.split(".")):
        return False
    try:
        return importlib.util.find_spec(token.split(".")[0]) is not None
    except (ImportError, ValueError):
        return False


def split_plugin_values(argv: list[str]) -> list[str]:
    """``--plugins a.py OUT`` → ``--plugins=a.py OUT``: ``--plugins`` takes several values, and
    would swallow the positional argument after them; its first value is always a plug-in,
    the next ones only while they look like plug-ins (see :func:`_plugin_like`)."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if token == "--":
            return out + argv[i:]
        if token == "--plugins" and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            out.append(f"--plugins={argv[i + 1]}")
            i += 2
            while i < len(argv) and _plugin_like(argv[i]):
                out.append(f"--plugins={argv[i]}")
                i += 1
            continue
        out.append(token)
        i += 1
    return out


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


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1 (one clear message otherwise)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def add_key_values_option(parser: argparse.ArgumentParser, flag: str, help: str) -> None:
    """``FLAG KEY=VALUE ...`` (repeatable): a part's or an engine's arguments, read by :func:`key_values`."""
    parser.add_argument(flag, nargs="+", action="extend", default=[], metavar="KEY=VALUE", help=help)


def key_values(texts: Iterable[str], flag: str) -> dict[str, Any]:
    """``KEY=VALUE`` texts given with ``flag`` as a mapping, each value read as YAML.

    Raises:
        ConfigValueError: a text that is no ``KEY=VALUE``, located at ``flag``.
    """
    from ..core.config import parse_override
    from ..core.errors import ConfigValueError

    values = {}
    for text in texts:
        try:
            key, value = parse_override(text)
        except ConfigValueError:
            raise ConfigValueError(f"{flag} {text!r} must look like key=value", path=flag) from None
        values[key] = value
    return values


def add_run_dir_option(parser: argparse.ArgumentParser) -> None:
    """``--run-dir DIR``: the run folder a config-taking command makes."""
    parser.add_argument("--run-dir", metavar="DIR", help="the run folder (default: runs/<config name>/<timestamp>)")


def printed_config(cfg: Any, ns: argparse.Namespace) -> bool:
    """With ``--print-config``: print the resolved config as YAML and say so (the command then stops)."""
    if not getattr(ns, "print_config", False):
        return False
    from ..core.text_safety import display_lines

    print(display_lines(cfg.to_yaml()), end="")
    return True
