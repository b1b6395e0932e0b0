"""``modforge check KIND NAME|module:Object [--args key=value ...]`` — run the conformance
suite on one part and print a pass/fail table. Exit status 1 when a check fails."""

from __future__ import annotations

from ...components.layouts import Layout
from ...core.coercion import parse_scalar
from ...core.registries import registry_for
from ..common import CommandParser, add_key_values_option, add_plugins_option, key_values, load_cli_plugins
from ..output import console, print_table

HELP = "run the conformance checks on a part (registered, or module:Object / file.py:Object)"


def _parser() -> CommandParser:
    parser = CommandParser("check", description=HELP)
    parser.add_argument("kind", help="frontend, backbone, neck, head or loss")
    parser.add_argument("target", metavar="NAME|module:Object", help="a registered name or an import path")
    add_key_values_option(parser, "--args", "constructor arguments beyond the wired ones (values read as YAML)")
    parser.add_argument(
        "--layout",
        nargs="+",
        action="extend",
        choices=[v.value for v in Layout],
        metavar="LAYOUT",
        help="input layout(s) to check (default: every layout the part declares)",
    )
    parser.add_argument("--in-dim", type=parse_scalar, metavar="N", help="input size (default: a small one per layout)")
    add_plugins_option(parser)
    return parser


def run(argv: list[str]) -> int:
    from ...testing import check_part

    ns = _parser().parse_args(argv)
    plugins = load_cli_plugins(ns.plugins)
    registry = registry_for(ns.kind)
    results = check_part(registry.kind, ns.target, key_values(ns.args, "--args"), layouts=ns.layout, in_dim=ns.in_dim, plugins=plugins)
    print_table(("check", "layout", "result", "detail"), [(r.check, r.layout, r.status, r.detail) for r in results])
    failed = [r for r in results if r.status == "fail"]
    summary = f"{len(results) - len(failed)} passed or skipped, {len(failed)} failed"
    console().print(f"{registry.kind} '{ns.target}': {summary}", markup=False)
    return 1 if failed else 0
