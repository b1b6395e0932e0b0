"""``modforge test RUN_DIR|CHECKPOINT`` — evaluate a trained model on its test split."""

from __future__ import annotations

from pathlib import Path

from ...core.config import display_path
from ..common import CommandParser, add_checkpoint_option, add_plugins_option, load_cli_plugins
from ..output import print_table

HELP = "evaluate a run (best.pt, else last.pt) or a checkpoint on the test split"


def _parser() -> CommandParser:
    parser = CommandParser("test", description=HELP)
    parser.add_argument("target", metavar="RUN_DIR|CHECKPOINT")
    parser.add_argument("--split", choices=("test", "val", "train"), default="test")
    add_checkpoint_option(parser)
    add_plugins_option(parser)
    return parser


def run(argv: list[str]) -> int:
    from ...experiment.runner import evaluate_checkpoint
    from ...experiment.runs import write_json

    ns = _parser().parse_args(argv)
    load_cli_plugins(ns.plugins)
    results, path = evaluate_checkpoint(Path(ns.target), split=ns.split, which=ns.checkpoint)
    rows = [
        (name, f"{value:.4f}" if isinstance(value, float) else value)
        for name, value in results.items()
        if not isinstance(value, list)
    ]
    print_table(("metric", "value"), rows, title=f"{ns.split} — {display_path(path)}")
    if path.parent.name == "checkpoints":
        out = path.parent.parent / "evaluations"
        out.mkdir(exist_ok=True)
        write_json(out / f"{path.stem}-{ns.split}.json", {"checkpoint": str(path), "split": ns.split, **results})
    return 0
