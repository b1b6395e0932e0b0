"""``modforge describe KIND NAME`` — a part's arguments, docstring and origin."""

from __future__ import annotations

from ...core.arguments import REQUIRED, ArgSpec
from ...core.registries import REGISTRIES, registry_for
from ..common import CommandParser, add_plugins_option, load_cli_plugins
from ..output import console, print_table

HELP = "show one part's arguments, types, defaults, help and where it is defined"


def _parser() -> CommandParser:
    parser = CommandParser("describe", description=HELP)
    parser.add_argument("kind", help=f"one of: {', '.join(REGISTRIES)}")
    parser.add_argument("name", help="the registered name")
    add_plugins_option(parser)
    return parser


def _default(arg: ArgSpec) -> str:
    if arg.injected:
        return "(set by the builder)"
    if arg.default is REQUIRED:
        return "—"
    return repr(arg.default)


def run(argv: list[str]) -> int:
    ns = _parser().parse_args(argv)
    load_cli_plugins(ns.plugins)
    registry = registry_for(ns.kind)
    entry = registry.entry(ns.name)
    sig = entry.signature
    out = console()
    what = "class" if entry.is_class else "function"
    text = [f"{entry.kind} '{entry.name}' ({what} {entry.qualname})"]
    if sig.summary:
        text.append(sig.summary)
    text += [f"defined in: {entry.location}", ""]
    out.print("\n".join(text), markup=False)
    rows = [(a.name, a.type_name, _default(a), "yes" if a.required else "no", a.help) for a in sig.args]
    if rows:
        print_table(("argument", "type", "default", "required", "help"), rows)
    else:
        out.print("no arguments")
    if sig.var_keyword:
        out.print(
            f"**{sig.var_keyword}: further keyword arguments are accepted and passed through unvalidated", markup=False
        )
    if sig.var_positional:
        out.print(f"*{sig.var_positional}: extra positional arguments cannot be set from a config", markup=False)
    if sig.doc and sig.doc.strip() != sig.summary:
        out.print("")
        out.print(sig.doc, markup=False)
    return 0
