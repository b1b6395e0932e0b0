"""What a parsed sweep file is: :class:`SweepSpec` and its parts, the keys and words a sweep file may use,
and :class:`SweepSpecError`. Parsing lives in :mod:`.spec_parser`; :mod:`.spec` is the entry point."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any, Literal

from ..core.errors import ConfigError

__all__ = [
    "AUTO_KEYS",
    "COMMANDS",
    "DEFAULT_MAX_TRIALS",
    "DISTRIBUTIONS",
    "FORBIDDEN_KEYS",
    "GOALS",
    "PRUNERS",
    "SAMPLERS",
    "SPECIAL_KEYS",
    "TOP_KEYS",
    "Axis",
    "AxisValue",
    "Collect",
    "OptunaSpec",
    "RandomParam",
    "RandomSpace",
    "RaySpec",
    "ReportSpec",
    "SweepSpec",
    "SweepSpecError",
    "default_goal",
    "is_number",
]

TOP_KEYS = ("name", "config", "command", "overrides", "grid", "random", "seeds", "search", "optuna", "ray", "collect",
            "report")  # fmt: skip
"""Keys a sweep file may hold (a search or backend with settings of its own adds its section here)."""
COMMANDS = ("train", "test")
"""What a trial runs: ``modforge train CONFIG`` or ``modforge test CONFIG`` (a config's ``model.init`` weights)."""
SPECIAL_KEYS = ("config", "command")
"""Keys of an overrides mapping that are not overrides: the trial's config file and command."""
AUTO_KEYS = ("train.num_threads", "train.progress")
"""Overrides the sweep adds to every trial unless the sweep file sets them."""
DISTRIBUTIONS = ("uniform", "loguniform", "int", "choice")
GOALS = ("max", "min", "none")
SAMPLERS = ("tpe", "random")
PRUNERS = ("median", "none")
DEFAULT_MAX_TRIALS = 10_000
"""The most trials a sweep may plan (grid points × random draws × seeds, or optuna trials)
unless the command line raises it (``--max-trials``)."""
FORBIDDEN_KEYS = {
    "--plugins": "plug-ins are named on the command line or lie beside the config",
    "plugins": "plug-ins are named on the command line or lie beside the config",
    "--resume": "the sweep decides when a trial resumes",
    "--run-dir": "the sweep chooses each trial's folder",
    "--nproc": "a sweep file does not start distributed processes (pass --nproc N to modforge sweep)",
}
"""Override keys a sweep file may not set (the user's command line only), and why."""
_MIN_WORDS = ("loss", "error", "errors", "eer", "dcf", "forgetting", "seconds", "time", "runtime", "wer", "cer")


class SweepSpecError(ConfigError):
    """A sweep file is malformed: the message names the key, the file and line, and what was expected."""


@dataclasses.dataclass(frozen=True)
class AxisValue:
    """One value of a grid axis.

    Attributes:
        label: how tables, plots and trial ids show it (``er``, ``0.01``).
        overrides: what it sets, in order: ``KEY.PATH`` → value, ``--flag`` → value, and
            the special keys ``config`` (a config file) and ``command`` (``train``/``test``).
    """

    label: str
    overrides: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Axis:
    """One swept dimension of the grid: a column of the results table."""

    name: str
    values: tuple[AxisValue, ...]


@dataclasses.dataclass(frozen=True)
class RandomParam:
    """One dimension of the random space: ``key`` drawn from ``kind`` with ``args``."""

    key: str
    kind: Literal["uniform", "loguniform", "int", "choice"]
    args: tuple[Any, ...]


@dataclasses.dataclass(frozen=True)
class RandomSpace:
    """``random: {trials, seed, space}``: ``trials`` draws, reproducible from ``seed``."""

    trials: int
    seed: int
    params: tuple[RandomParam, ...]


@dataclasses.dataclass(frozen=True)
class OptunaSpec:
    """``optuna: {...}``: a Bayesian search through Optuna (``search: optuna``).

    Attributes:
        trials: how many trials the study runs in all (finished, pruned and failed ones count).
        params: the search space, in the syntax of ``random.space``.
        metric: the objective: a ``collect`` name (each trial's value of it is told to the study).
        goal: ``max`` or ``min`` (default: that collect entry's goal).
        sampler: ``tpe`` (default) or ``random``.
        seed: the sampler's seed (each trial's suggestion is reproducible from it and the study so far).
        startup_trials: trials drawn at random before TPE models the results, and trials that
            finish before the pruner may prune.
        pruner: ``median`` (stop a trial whose per-epoch value is worse than the median of earlier
            trials at the same epoch) or ``none``.
        prune_on: the per-epoch metric the pruner sees (``None``: the config's ``train.monitor``).
        warmup_epochs: epochs of every trial that are never pruned.
    """

    trials: int
    params: tuple[RandomParam, ...]
    metric: str
    goal: Literal["max", "min"]
    sampler: Literal["tpe", "random"] = "tpe"
    seed: int = 0
    startup_trials: int = 5
    pruner: Literal["median", "none"] = "median"
    prune_on: str | None = None
    warmup_epochs: int = 1


@dataclasses.dataclass(frozen=True)
class RaySpec:
    """``ray: {...}``: settings of the Ray backend (``--backend ray``; its flags win).

    Attributes:
        address: an existing cluster (``auto``, ``ray://host:10001``, ``host:6379``); ``None``:
            a local Ray instance started by the sweep.
        cpus_per_trial: CPUs each trial reserves (× its ``--nproc`` processes); also its torch threads.
        gpus_per_trial: GPUs each trial reserves (× its ``--nproc`` processes); 0: none.
        max_retries: how often Ray runs a trial again after its worker died (each retry resumes
            from the trial's checkpoint).
    """

    address: str | None = None
    cpus_per_trial: float = 1.0
    gpus_per_trial: float = 0.0
    max_retries: int = 2


@dataclasses.dataclass(frozen=True)
class Collect:
    """A value collected from every trial into ``trials.csv`` and the results table.

    Attributes:
        name: a path into the run's ``summary.json`` (``class_il.average_accuracy``; ``test_accuracy``
            finds ``test.accuracy`` too), or ``seconds``: the trial's wall-clock time.
        label: the column's heading.
        scale: the value is multiplied by it in tables (100: a fraction shown as %).
        decimals: digits after the point in tables.
        goal: which end is best (bold in the table); ``none``: no bold.
        agg: how a group's trials combine: ``mean`` (± std over seeds) or ``median``.
    """

    name: str
    label: str
    scale: float = 1.0
    decimals: int = 3
    goal: Literal["max", "min", "none"] = "max"
    agg: Literal["mean", "median"] = "mean"


@dataclasses.dataclass(frozen=True)
class ReportSpec:
    """``report: {title, description}``: the markdown report's heading and the paragraph under it."""

    title: str
    description: str = ""


@dataclasses.dataclass(frozen=True)
class SweepSpec:
    """A parsed sweep file.

    Attributes:
        file: the sweep file.
        name: the sweep's name (default: the file's stem); the default folder is ``runs/sweeps/<name>``.
        config: the base config (absolute), unless every trial's grid value names one.
        command: ``train`` (default) or ``test``.
        overrides: fixed for every trial (``KEY.PATH``/``--flag`` → value).
        grid: the grid's axes, in file order (their product is taken).
        random: the random space, or ``None``.
        seeds: seeds every point is run with (``--seed``); ``None``: the config's own seed.
        search: the search's name (``grid`` or ``random`` by default, ``optuna`` with an
            ``optuna:`` section; see :mod:`.search`).
        optuna: the ``optuna:`` section (``None`` without one).
        ray: the ``ray:`` section (``None`` without one).
        collect: what is collected from every trial.
        report: the report's title and description.
        data: the resolved sweep as plain data (what ``sweep.yaml`` in the sweep folder holds).
    """

    file: Path
    name: str
    config: Path | None
    command: str
    overrides: dict[str, Any]
    grid: tuple[Axis, ...]
    random: RandomSpace | None
    seeds: tuple[int, ...] | None
    search: str
    collect: tuple[Collect, ...]
    report: ReportSpec
    data: dict[str, Any]
    optuna: OptunaSpec | None = None
    ray: RaySpec | None = None

    def setting_keys(self) -> set[str]:
        """Every override key the sweep sets anywhere (fixed, grid, random)."""
        keys = set(self.overrides)
        for axis in self.grid:
            for value in axis.values:
                keys.update(value.overrides)
        if self.random is not None:
            keys.update(p.key for p in self.random.params)
        if self.optuna is not None:
            keys.update(p.key for p in self.optuna.params)
        return keys


def is_number(text: str) -> bool:
    """Whether ``text`` reads as a number (``-0.5``, ``1e-3``: a value, not a flag)."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def default_goal(name: str) -> Literal["max", "min", "none"]:
    """The best end of a metric from its name: ``seconds`` none; losses, errors, EER, minDCF,
    forgetting and times lowest; everything else highest."""
    if name == "seconds":
        return "none"
    tokens = set(re.split(r"[^a-z0-9]+", name.lower()))  # whole words: 'answer_f1' is no 'wer', 'sentiment' no 'time'
    return "min" if tokens & set(_MIN_WORDS) else "max"
