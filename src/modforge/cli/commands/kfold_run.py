"""``modforge kfold CONFIG --folds K [key=value ...]`` — stratified k-fold cross-validation."""

from __future__ import annotations

import argparse
import logging

from ...core.config import display_path
from ..common import add_run_dir_option, printed_config
from ..config_args import resolve_config_from_cli
from ..output import print_table

HELP = "stratified k-fold cross-validation: K models, a per-fold table and mean ± std in kfold.json"
log = logging.getLogger("modforge.cli")


def _own_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--folds", type=int, default=5, metavar="K", help="number of folds (default 5)")
    add_run_dir_option(parser)


def run(argv: list[str]) -> int:
    from ...experiment.kfold import check_folds, run_kfold
    from ...experiment.runs import plan_run_dir

    resolved = resolve_config_from_cli("kfold", argv, description=HELP, add_arguments=_own_options)
    cfg, ns = resolved.config, resolved.args
    if printed_config(cfg, ns):
        return 0
    check_folds(ns.folds)
    run_dir = plan_run_dir(cfg, ns.run_dir)  # checked now; made by run_kfold once the folds fit the data
    result = run_kfold(cfg, ns.folds, run_dir)
    keys = list(result["mean"])
    rows = [[f"fold {r['fold']}", *(f"{r[k]:.4f}" for k in keys)] for r in result["folds"]]
    rows.append(["mean ± std", *(f"{result['mean'][k]:.4f} ± {result['std'][k]:.4f}" for k in keys)])
    print_table(["", *keys], rows, title=f"{cfg.name}: {ns.folds}-fold cross-validation — {display_path(run_dir)}")
    return 0
