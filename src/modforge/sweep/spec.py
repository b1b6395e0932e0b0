"""The sweep file: parsing and validating ``SWEEP.yaml`` into a :class:`SweepSpec`.

A sweep file is read like a config (safe YAML only, ``_base_`` inheritance, every key's
file and line remembered), then checked key by key: a bad one is one
:class:`SweepSpecError` naming the key, the file and line, and what was expected.
The format is documented in :mod:`modforge.sweep` and in ``configs/sweeps/reference.yaml``.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import re
from pathlib import Path
from typing import Any, Literal

from ..core.config import Config, check_keys, display_path, load_config
from ..core.errors import ConfigError

__all__ = [
    "AUTO_KEYS",
    "COMMANDS",
    "TOP_KEYS",
    "Axis",
    "AxisValue",
    "Collect",
    "RandomParam",
    "RandomSpace",
    "ReportSpec",
    "SweepSpec",
    "SweepSpecError",
    "load_sweep",
    "parse_sweep",
]

TOP_KEYS = ("name", "config", "command", "overrides", "grid", "random", "seeds", "search", "collect", "report")
"""Keys a sweep file may hold (a follow-up search adds its own section here)."""
COMMANDS = ("train", "test")
"""What a trial runs: ``modforge train CONFIG`` or ``modforge test CONFIG`` (a config's ``model.init`` weights)."""
SPECIAL_KEYS = ("config", "command")
"""Keys of an overrides mapping that are not overrides: the trial's config file and command."""
AUTO_KEYS = ("train.num_threads", "train.progress")
"""Overrides the sweep adds to every trial unless the sweep file sets them."""
DISTRIBUTIONS = ("uniform", "loguniform", "int", "choice")
GOALS = ("max", "min", "none")
_MIN_WORDS = ("loss", "error", "eer", "dcf", "forgetting", "seconds", "time", "wer", "cer")
_KEY_PATH = re.compile(r"^[A-Za-z_][\w-]*(\.[\w-]+)*$")
_FLAG = re.compile(r"^--[A-Za-z][\w.-]*$")


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
        search: the search's name (``grid`` or ``random`` by default; see :mod:`.search`).
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

    def setting_keys(self) -> set[str]:
        """Every override key the sweep sets anywhere (fixed, grid, random)."""
        keys = set(self.overrides)
        for axis in self.grid:
            for value in axis.values:
                keys.update(value.overrides)
        if self.random is not None:
            keys.update(p.key for p in self.random.params)
        return keys


def load_sweep(path: str | Path) -> SweepSpec:
    """Read and check a sweep file.

    Raises:
        SweepSpecError: the file is missing, not YAML, or a key is malformed (key, file and line named).
    """
    try:
        cfg = load_config(Path(path))
    except SweepSpecError:
        raise
    except ConfigError as exc:
        raise SweepSpecError(exc.message, path=exc.path, source=exc.source) from None
    return parse_sweep(cfg)


def parse_sweep(cfg: Config) -> SweepSpec:
    """A :class:`SweepSpec` from a loaded sweep file (see :func:`load_sweep`)."""
    try:
        return _Parser(cfg).parse()
    except SweepSpecError:
        raise
    except ConfigError as exc:  # check_keys' unknown key: the same error kind as every other
        raise SweepSpecError(exc.message, path=exc.path, source=exc.source) from None


class _Parser:
    """Checks one sweep file; every error is located with the config's origins."""

    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.shown = display_path(cfg.file) if cfg.file else "the sweep"

    def fail(self, path: str, message: str) -> SweepSpecError:
        return SweepSpecError(message, path=path, source=self.cfg.where(path) or self.shown)

    def mapping(self, value: Any, path: str) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(path, f"expected a mapping, got {value!r}")
        return value

    def parse(self) -> SweepSpec:
        data = self.cfg.data
        check_keys(data, TOP_KEYS, what="sweep key", origin_of=self.cfg.where)
        name = data.get("name", self.cfg.file.stem if self.cfg.file else "sweep")
        if not isinstance(name, str) or not re.fullmatch(r"[\w.-]+", name) or name in (".", ".."):
            raise self.fail("name", f"expected a folder-safe name (letters, digits, '_', '-', '.'), got {name!r}")
        command = data.get("command", "train")
        if command not in COMMANDS:
            raise self.fail("command", f"expected one of {', '.join(COMMANDS)}, got {command!r}")
        overrides = self.overrides(data.get("overrides"), "overrides", special=False)
        grid = self.grid(data.get("grid"))
        random = self.random(data.get("random"))
        config = self.config_path(data.get("config"), "config") if data.get("config") is not None else None
        if config is None and not any(all("config" in v.overrides for v in axis.values) for axis in grid):
            raise self.fail("config", "required: the base config file (a path relative to the sweep file), "
                            "unless a grid axis gives every value its own 'config'")  # fmt: skip
        seeds = self.seeds(data.get("seeds"))
        search = data.get("search", "random" if random is not None else "grid")
        if not isinstance(search, str):
            raise self.fail("search", f"expected the name of a search, got {search!r}")
        if not grid and random is None and search in ("grid", "random") and seeds is None:
            raise self.fail("grid", "the sweep has nothing to vary: give a grid, a random space or seeds")
        collect = self.collect(data.get("collect"))
        report = self.report(data.get("report"), name)
        resolved = copy.deepcopy(data)  # as stored in the sweep folder: config paths absolute, axes named
        resolved["name"] = name
        if config is not None:
            resolved["config"] = config
        if grid:
            resolved["grid"] = {axis.name: {v.label: dict(v.overrides) for v in axis.values} for axis in grid}
        return SweepSpec(
            file=self.cfg.file or Path("sweep.yaml"), name=name, config=config, command=command,
            overrides=overrides, grid=grid, random=random, seeds=seeds, search=search, collect=collect,
            report=report, data=resolved,
        )  # fmt: skip

    # ---------------------------------------------------------------- pieces
    def config_path(self, value: Any, path: str) -> str:
        if not isinstance(value, str) or not value.strip():
            raise self.fail(path, f"expected a config file path, got {value!r}")
        file = Path(value).expanduser()
        if not file.is_absolute():
            file = self.cfg.base_dir / file
        if not file.is_file():
            raise self.fail(path, f"config file '{value}' not found (looked for {display_path(file)})")
        return str(file.resolve())

    def overrides(self, value: Any, path: str, *, special: bool) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, item in self.mapping(value, path).items():
            where = f"{path}.{key}"
            if not isinstance(key, str):
                raise self.fail(path, f"keys are KEY.PATH or --flag, got {key!r}")
            if key in SPECIAL_KEYS:
                if not special:
                    raise self.fail(where, f"'{key}' is set at the top of the sweep file, not among the overrides")
                if key == "config":
                    item = self.config_path(item, where)
                elif item not in COMMANDS:
                    raise self.fail(where, f"expected one of {', '.join(COMMANDS)}, got {item!r}")
            elif key == "seed" or key == "--seed":
                raise self.fail(where, "seeds are given by the sweep's 'seeds:' list, not as an override")
            elif not (_FLAG.match(key) or _KEY_PATH.match(key)):
                raise self.fail(where, f"expected KEY.PATH (as 'modforge train' takes it) or --flag, got {key!r}")
            out[key] = item
        return out

    def grid(self, value: Any) -> tuple[Axis, ...]:
        axes = []
        for name, spec in self.mapping(value, "grid").items():
            path = f"grid.{name}"
            if isinstance(spec, list):
                if not spec:
                    raise self.fail(path, "expected at least one value")
                if name in SPECIAL_KEYS:
                    values = [AxisValue(_label(v), self.overrides({name: v}, path.rpartition(".")[0], special=True))
                              for v in spec]  # fmt: skip
                else:
                    self.overrides({name: None}, "grid", special=False)
                    values = [AxisValue(_label(v), {name: v}) for v in spec]
            elif isinstance(spec, dict) and spec:
                values = []
                for label, sets in spec.items():
                    if not isinstance(sets, (dict, type(None))):
                        raise self.fail(f"{path}.{label}", "a named value is a mapping of what it sets "
                                        f"(KEY.PATH / --flag / config / command → value), got {sets!r}")  # fmt: skip
                    values.append(AxisValue(str(label), self.overrides(sets, f"{path}.{label}", special=True)))
            else:
                raise self.fail(path, "expected a list of values for that key, or a mapping of named values "
                                f"(label → what it sets), got {spec!r}")  # fmt: skip
            labels = [v.label for v in values]
            if len(set(labels)) != len(labels):
                raise self.fail(path, f"two values show as the same label: {labels}")
            axes.append(Axis(str(name), tuple(values)))
        return tuple(axes)

    def random(self, value: Any) -> RandomSpace | None:
        if value is None:
            return None
        spec = self.mapping(value, "random")
        check_keys(spec, ("trials", "seed", "space"), path="random", origin_of=self.cfg.where)
        trials, seed = spec.get("trials"), spec.get("seed", 0)
        if not isinstance(trials, int) or isinstance(trials, bool) or trials < 1:
            raise self.fail("random.trials", f"expected a number of trials ≥ 1, got {trials!r}")
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise self.fail("random.seed", f"expected an integer seed, got {seed!r}")
        params = []
        for key, dist in self.mapping(spec.get("space"), "random.space").items():
            path = f"random.space.{key}"
            self.overrides({key: None}, "random.space", special=False)
            if not isinstance(dist, dict) or len(dist) != 1 or next(iter(dist)) not in DISTRIBUTIONS:
                raise self.fail(path, f"expected one of {{{': ..., '.join(DISTRIBUTIONS)}: ...}}, got {dist!r}")
            kind, args = next(iter(dist.items()))
            params.append(RandomParam(key, kind, self.distribution(kind, args, f"{path}.{kind}")))
        if not params:
            raise self.fail("random.space", "expected at least one KEY: {uniform|loguniform|int|choice: ...}")
        return RandomSpace(trials, seed, tuple(params))

    def distribution(self, kind: str, args: Any, path: str) -> tuple[Any, ...]:
        if kind == "choice":
            if not isinstance(args, list) or not args:
                raise self.fail(path, f"expected a non-empty list of values, got {args!r}")
            return tuple(args)
        number = int if kind == "int" else (int, float)
        if (not isinstance(args, list) or len(args) != 2 or any(isinstance(a, bool) or not isinstance(a, number)
                                                                 for a in args)):  # fmt: skip
            kind_word = "integers" if kind == "int" else "numbers"
            raise self.fail(path, f"expected [low, high] ({kind_word}), got {args!r}")
        low, high = args
        if not low <= high or (kind == "loguniform" and low <= 0) or not all(math.isfinite(a) for a in args):
            raise self.fail(path, f"expected finite low ≤ high{' and low > 0' if kind == 'loguniform' else ''}, "
                            f"got {args!r}")  # fmt: skip
        return (low, high)

    def seeds(self, value: Any) -> tuple[int, ...] | None:
        if value is None:
            return None
        if isinstance(value, int) and not isinstance(value, bool):
            value = [value]
        if not isinstance(value, list) or not value or any(isinstance(s, bool) or not isinstance(s, int)
                                                            for s in value):  # fmt: skip
            raise self.fail("seeds", f"expected a list of integer seeds, got {value!r}")
        if len(set(value)) != len(value):
            raise self.fail("seeds", f"a seed is listed twice: {value}")
        return tuple(value)

    def collect(self, value: Any) -> tuple[Collect, ...]:
        if not isinstance(value, list) or not value:
            raise self.fail("collect", "required: a list of the summary.json values to collect "
                            f"(e.g. [test.accuracy, seconds]), got {value!r}")  # fmt: skip
        out, names = [], set()
        for i, item in enumerate(value):
            path = f"collect.{i}"
            if isinstance(item, str):
                item = {"name": item}
            if not isinstance(item, dict):
                raise self.fail(path, f"expected a name or {{name, label, scale, decimals, goal, agg}}, got {item!r}")
            check_keys(item, [f.name for f in dataclasses.fields(Collect)], path=path, origin_of=self.cfg.where)
            name = item.get("name")
            if not isinstance(name, str) or not name:
                raise self.fail(f"{path}.name", f"expected a path into summary.json or 'seconds', got {name!r}")
            if name in names:
                raise self.fail(f"{path}.name", f"'{name}' is collected twice")
            names.add(name)
            scale = item.get("scale", 1.0)
            decimals = item.get("decimals", 3)
            goal = item.get("goal", default_goal(name))
            agg = item.get("agg", "mean")
            if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
                raise self.fail(f"{path}.scale", f"expected a number, got {scale!r}")
            if isinstance(decimals, bool) or not isinstance(decimals, int) or not 0 <= decimals <= 12:
                raise self.fail(f"{path}.decimals", f"expected an integer from 0 to 12, got {decimals!r}")
            if goal not in GOALS:
                raise self.fail(f"{path}.goal", f"expected one of {', '.join(GOALS)}, got {goal!r}")
            if agg not in ("mean", "median"):
                raise self.fail(f"{path}.agg", f"expected mean or median, got {agg!r}")
            label = item.get("label", name)
            out.append(Collect(name, str(label), float(scale), decimals, goal, agg))
        return tuple(out)

    def report(self, value: Any, name: str) -> ReportSpec:
        spec = self.mapping(value, "report")
        check_keys(spec, ("title", "description"), path="report", origin_of=self.cfg.where)
        for key in spec:
            if not isinstance(spec[key], str):
                raise self.fail(f"report.{key}", f"expected text, got {spec[key]!r}")
        return ReportSpec(spec.get("title", f"Sweep {name}"), spec.get("description", "").strip())


def default_goal(name: str) -> Literal["max", "min", "none"]:
    """The best end of a metric from its name: ``seconds`` none; losses, errors, EER, minDCF,
    forgetting and times lowest; everything else highest."""
    if name == "seconds":
        return "none"
    low = name.lower()
    return "min" if any(word in low for word in _MIN_WORDS) else "max"


def _label(value: Any) -> str:
    """How a plain axis value shows: numbers and strings as typed; anything else as compact JSON."""
    if isinstance(value, str):
        return Path(value).stem if value.endswith((".yaml", ".yml")) else value
    if isinstance(value, bool) or value is None:
        return str(value).lower()
    if isinstance(value, (int, float)):
        return f"{value:g}" if isinstance(value, float) else str(value)
    import json

    return json.dumps(value, separators=(",", ":"), sort_keys=True)
