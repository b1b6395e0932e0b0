"""``modforge export RUN_DIR|CHECKPOINT --engine NAME [--out PATH]`` — write a trained model
as a self-describing artifact of an engine (onnx, torchscript, eager, compile)."""

from __future__ import annotations

from pathlib import Path

from ...core.config import display_path
from ..common import CommandParser, add_checkpoint_option, add_plugins_option, load_cli_plugins
from ..output import print_table

HELP = "write a run's model as an engine artifact (model + metadata), checked against eager"


def _parser() -> CommandParser:
    parser = CommandParser("export", description=HELP)
    parser.add_argument("target", metavar="RUN_DIR|CHECKPOINT")
    parser.add_argument("--engine", required=True, help="onnx, torchscript, eager or compile (any registered engine)")
    parser.add_argument("--out", type=Path, help="the artifact's path (default: RUN_DIR/exports/<checkpoint><suffix>)")
    add_checkpoint_option(parser)
    parser.add_argument("--force", action="store_true", help="replace an existing file at --out")
    add_plugins_option(parser)
    return parser


def run(argv: list[str]) -> int:
    from ...experiment.export import export_run

    ns = _parser().parse_args(argv)
    load_cli_plugins(ns.plugins)
    result = export_run(Path(ns.target), ns.engine, ns.out, which=ns.checkpoint, force=ns.force)
    rows = [
        ("artifact", display_path(result.path)),
        ("engine", result.engine),
        ("from", display_path(result.checkpoint)),
        ("input", f"{result.metadata['input']['layout']} {result.metadata['input']['shape']}"),
        ("max |Δ| vs eager", f"{result.max_abs_diff:.2e} (outputs up to {result.output_scale:.3g})"),
    ]
    print_table(("", ""), rows, title="exported")
    return 0
