"""``--epochs``, ``--lr``, ``--batch-size``: the shortcuts every config-taking command shares.

They mean the same on every command that takes a config — ``config``, ``train``, ``kfold``,
``test CONFIG`` — so ``modforge config X --lr 0.01`` prints exactly the config that
``modforge train X --lr 0.01`` trains (the optimizer's learning rate, never a part's
argument that happens to be called ``lr``: that one stays reachable as ``--backbone.lr``).
"""

from __future__ import annotations

import argparse
import dataclasses

from ..core.config import Config
from ..core.origins import CommandLineOrigin

__all__ = ["RUN_OPTIONS", "RunOption", "add_run_options", "apply_run_options"]


@dataclasses.dataclass(frozen=True)
class RunOption:
    """One shortcut: its flag, the config path it sets and the value's type."""

    flag: str
    path: str
    type: type
    metavar: str

    @property
    def dest(self) -> str:
        return self.flag.removeprefix("--").replace("-", "_")


RUN_OPTIONS: tuple[RunOption, ...] = (
    RunOption("--epochs", "train.max_epochs", int, "N"),
    RunOption("--lr", "train.optimizer.args.lr", float, "LR"),
    RunOption("--batch-size", "data.batch_size", int, "N"),
)


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """Add the shortcuts a command does not define itself (one that does keeps its own)."""
    taken = parser._option_string_actions  # noqa: SLF001 - argparse has no public accessor
    for option in RUN_OPTIONS:
        if option.flag not in taken:
            parser.add_argument(option.flag, type=option.type, metavar=option.metavar, help=f"sets {option.path}")


def apply_run_options(cfg: Config, ns: argparse.Namespace) -> None:
    """Write the shortcuts given on the command line into ``cfg`` (before validation)."""
    for option in RUN_OPTIONS:
        value = getattr(ns, option.dest, None)
        if value is None:
            continue
        if option.path.startswith("train.optimizer.") and not isinstance(
            (cfg.data.get("train") or {}).get("optimizer"), dict
        ):
            optimizer = (cfg.data.get("train") or {}).get("optimizer")
            spec = {"type": optimizer, "args": {}} if isinstance(optimizer, str) else {"type": "adamw", "args": {}}
            cfg.set("train.optimizer", spec, cfg.where("train.optimizer") or "default")
        cfg.set(option.path, value, CommandLineOrigin(f"flag {option.flag}"))
