"""``modforge test RUN_DIR|CHECKPOINT|CONFIG [key=value ...]`` — evaluate a model on a split.

A run folder or checkpoint: the trained model. Overrides change the stored config first, so
it can be evaluated on other data: ``modforge test runs/x data.type=in_the_wild
data.args.meta=/data/itw/meta.csv``.

A config file (``.yaml``): the model it builds — with the weights ``model.init`` names,
e.g. a paper's published checkpoint — evaluated without training into a new run folder
(``--run-dir``, else ``runs/<config>/<time>``) with the task's usual report. Part flags and
overrides work as for ``modforge train``.
"""

from __future__ import annotations

from pathlib import Path

from ...core.config import display_path
from ..common import (
    CommandParser,
    add_checkpoint_option,
    add_plugins_option,
    add_run_dir_option,
    load_cli_plugins,
    printed_config,
)
from ..output import print_table
from ..run_options import add_run_options

HELP = "evaluate a run (best.pt, else last.pt), a checkpoint, or a config's model.init weights on the test split"


def _parser() -> CommandParser:
    parser = CommandParser("test", description=HELP)
    parser.add_argument("target", metavar="RUN_DIR|CHECKPOINT|CONFIG")
    parser.add_argument(
        "overrides", nargs="*", metavar="KEY=VALUE", help="change the run's config first (e.g. another dataset)"
    )
    parser.add_argument("--split", choices=("test", "val", "train"), default="test")
    add_checkpoint_option(parser)
    add_plugins_option(parser)
    with_config = parser.add_argument_group(
        "with a CONFIG (.yaml)", "the model it builds, with model.init's weights; part flags work as for train"
    )
    add_run_dir_option(with_config)
    with_config.add_argument("--print-config", action="store_true", help="print the resolved config and stop")
    add_run_options(with_config)
    return parser


def _value(value) -> str:
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def _config_target(argv: list[str]) -> bool:
    """Whether the command names a config file (the first positional argument ends in .yaml)."""
    first = next((a for a in argv if not a.startswith("-")), "")
    return first.endswith((".yaml", ".yml")) and Path(first).is_file()


def _config_options(parser) -> None:
    parser.add_argument("--split", choices=("test", "val", "train"), default="test")
    add_run_dir_option(parser)


def _print_results(results: dict, split: str, title: str) -> None:
    metrics = results[split]
    rows = [(name, _value(value)) for name, value in metrics.items() if not isinstance(value, (list, dict))]
    print_table(("metric", "value"), rows, title=f"{split} — {title}")
    per_attack = results.get(f"{split}_per_attack")
    if per_attack:
        attack_rows = [(attack, _value(v["eer"]), v["files"]) for attack, v in per_attack.items()]
        print_table(("attack", "eer", "files"), attack_rows, title="per attack (each attack's files vs all bona fide)")
    subsets = [(name, results.get(f"{split}_{name}")) for name in ("seen", "unseen")]
    if all(figures for _, figures in subsets):
        subset_rows = [(name, _value(f["eer"]), _value(f["min_dcf"]), f["spoofed_files"]) for name, f in subsets]
        print_table(("attacks", "eer", "min_dcf", "spoofed files"), subset_rows,
                    title="attacks seen in training and unseen (their spoofs vs all bona fide)")  # fmt: skip


def _test_config(argv: list[str]) -> int:
    from ...experiment.evaluate_config import evaluate_config
    from ...experiment.run_plugins import check_signing_key
    from ...experiment.runs import new_run_dir
    from ..config_args import resolve_config_from_cli

    resolved = resolve_config_from_cli("test", argv, description=HELP, add_arguments=_config_options)
    cfg, ns = resolved.config, resolved.args
    if printed_config(cfg, ns):
        return 0
    check_signing_key(cfg.plugins)  # a key that cannot sign the copies: one error, no half-made run folder
    run_dir = new_run_dir(cfg, ns.run_dir)
    try:
        summary = evaluate_config(cfg, run_dir, split=ns.split)
    except BaseException:
        if not any(run_dir.iterdir()):
            run_dir.rmdir()  # nothing was written: leave no empty run folder behind
        raise
    _print_results(summary, ns.split, f"{cfg.name}: {summary['evaluated']} — {display_path(run_dir)}")
    return 0


def run(argv: list[str]) -> int:
    from ...core.safe_files import ensure_folder
    from ...experiment.runner import checkpoint_digest, evaluate_checkpoint, evaluation_stem
    from ...experiment.runs import write_json

    if _config_target(argv):
        return _test_config(argv)
    ns = _parser().parse_args(argv)
    config_only = [flag for flag, dest in (("--run-dir", "run_dir"), ("--print-config", "print_config"), ("--epochs", "epochs"),
                                           ("--lr", "lr"), ("--batch-size", "batch_size")) if getattr(ns, dest, None)]  # fmt: skip
    if config_only:
        from ...core.errors import UsageError

        raise UsageError(f"{', '.join(config_only)}: only with a CONFIG (.yaml) target; a run or checkpoint is tested "
                         "as it was trained (change its config with KEY=VALUE overrides)")  # fmt: skip
    load_cli_plugins(ns.plugins)
    results, path = evaluate_checkpoint(Path(ns.target), split=ns.split, which=ns.checkpoint, overrides=ns.overrides)
    metrics = results[ns.split]
    details = {k[len(ns.split) + 1 :]: v for k, v in results.items() if k.startswith(f"{ns.split}_")}  # per_attack...
    _print_results(results, ns.split, display_path(path))
    if path.parent.name == "checkpoints":
        out = ensure_folder(path.parent.parent / "evaluations")  # the run folder was checked: a real folder, no link
        stem = evaluation_stem(path, ns.split, ns.overrides, out)  # the stem the evaluation's files got
        record = {"checkpoint": str(path), "checkpoint_sha256": checkpoint_digest(path), "split": ns.split,
                  "overrides": ns.overrides, **metrics}  # fmt: skip
        record.update({k: v for k, v in details.items() if k not in record})  # never over the record's own keys
        write_json(out / f"{stem.rstrip('-')}.json", record)
    return 0
