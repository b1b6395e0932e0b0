"""``modforge describe KIND NAME`` — a part's arguments, docstring and origin."""

from __future__ import annotations

from ...components.layouts import Layout
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


def _part_contract(obj: object) -> list[str]:
    """Layouts and the out_dim rule of a model part (nothing for other kinds)."""
    lines = []
    accepts = getattr(obj, "accepts", None)
    if accepts:
        lines.append("input layouts: " + "; ".join(str(Layout(a)) for a in accepts))
    produces = getattr(obj, "produces", None)
    if isinstance(produces, (str, Layout)):
        lines.append(f"output layout: {Layout(produces)}")
    rule = getattr(obj, "out_dim_rule", "")
    if rule:
        lines.append(f"out_dim: {rule}")
    input_key = getattr(obj, "input_key", None)
    if isinstance(input_key, str):
        lines.append(f"reads: batch['{input_key}'] and batch['{getattr(obj, 'target_key', 'label')}']")
    return lines


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
    text.append(f"defined in: {entry.location}")
    text += _part_contract(entry.obj)
    text.append("")
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
