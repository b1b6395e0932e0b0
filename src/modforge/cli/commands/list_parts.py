"""``modforge list [KIND] [PATTERN]`` — a table of registered parts."""

from __future__ import annotations

from ...core.registries import REGISTRIES, registry_for
from ..common import CommandParser, add_plugins_option, load_cli_plugins
from ..output import print_table

HELP = "list registered parts (all kinds, or one kind), optionally filtered by a wildcard"
_WILDCARDS = set("*?[")


def _first_sentence(text: str, limit: int = 90) -> str:
    """A one-line description: the first sentence, cut at ``limit`` characters."""
    sentence = text.split(". ", 1)[0].rstrip(".") + "." if text else ""
    return sentence if len(sentence) <= limit else sentence[: limit - 1].rstrip() + "…"


def _parser() -> CommandParser:
    parser = CommandParser("list", description=HELP)
    parser.add_argument("kind", nargs="?", help=f"one of: {', '.join(REGISTRIES)} (default: all)")
    parser.add_argument("pattern", nargs="?", help="shell wildcard on names, e.g. 'res*'")
    add_plugins_option(parser)
    return parser


def run(argv: list[str]) -> int:
    ns = _parser().parse_args(argv)
    load_cli_plugins(ns.plugins)
    kind, pattern = ns.kind, ns.pattern
    if kind is not None and pattern is None and _WILDCARDS & set(kind) and kind not in REGISTRIES:
        kind, pattern = None, kind  # `modforge list 'res*'`: a pattern over every kind
    registries = [registry_for(kind)] if kind else list(REGISTRIES.values())
    rows = [
        (entry.kind, entry.name, entry.origin, _first_sentence(entry.summary))
        for registry in registries
        for entry in registry.entries(pattern)
    ]
    if not rows:
        what = f"{registries[0].kind} parts" if kind else "parts"
        suffix = f" matching '{pattern}'" if pattern else ""
        print(f"no registered {what}{suffix}")
        return 0
    print_table(("kind", "name", "from", "description"), rows)
    return 0
