"""``modforge test RUN_DIR|CHECKPOINT [key=value ...]`` — evaluate a trained model on a split.

Overrides change the stored config first, so a model can be evaluated on other data:
``modforge test runs/x data.type=in_the_wild data.args.meta=/data/itw/meta.csv``.
"""

from __future__ import annotations

from pathlib import Path

from ...core.config import display_path
from ..common import CommandParser, add_checkpoint_option, add_plugins_option, load_cli_plugins
from ..output import print_table

HELP = "evaluate a run (best.pt, else last.pt) or a checkpoint on the test split"


def _parser() -> CommandParser:
    parser = CommandParser("test", description=HELP)
    parser.add_argument("target", metavar="RUN_DIR|CHECKPOINT")
    parser.add_argument(
        "overrides", nargs="*", metavar="KEY=VALUE", help="change the run's config first (e.g. another dataset)"
    )
    parser.add_argument("--split", choices=("test", "val", "train"), default="test")
    add_checkpoint_option(parser)
    add_plugins_option(parser)
    return parser


def _value(value) -> str:
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def run(argv: list[str]) -> int:
    from ...experiment.runner import evaluate_checkpoint, evaluation_stem
    from ...experiment.runs import write_json

    ns = _parser().parse_args(argv)
    load_cli_plugins(ns.plugins)
    results, path = evaluate_checkpoint(Path(ns.target), split=ns.split, which=ns.checkpoint, overrides=ns.overrides)
    metrics = results[ns.split]
    rows = [(name, _value(value)) for name, value in metrics.items() if not isinstance(value, (list, dict))]
    print_table(("metric", "value"), rows, title=f"{ns.split} — {display_path(path)}")
    per_attack = results.get(f"{ns.split}_per_attack")
    if per_attack:
        attack_rows = [(attack, _value(v["eer"]), v["files"]) for attack, v in per_attack.items()]
        print_table(("attack", "eer", "files"), attack_rows, title="per attack (each attack's files vs all bona fide)")
    if path.parent.name == "checkpoints":
        out = path.parent.parent / "evaluations"
        out.mkdir(exist_ok=True)
        record = {"checkpoint": str(path), "split": ns.split, "overrides": ns.overrides, **metrics}
        if per_attack:
            record["per_attack"] = per_attack
        write_json(out / f"{evaluation_stem(path, ns.split, ns.overrides).rstrip('-')}.json", record)
    return 0
