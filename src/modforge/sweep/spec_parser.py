"""Checking a loaded sweep file key by key (:class:`SweepParser`): every error is one
:class:`~.spec_types.SweepSpecError` located with the config's origins, and the sweep file is held to
the rules of a config file (see :mod:`.spec`)."""

from __future__ import annotations

import copy
import dataclasses
import math
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..core.config import BASE_KEY, MAX_CONFIG_FILES, Config, check_keys, display_path
from ..core.origins import CommandLineOrigin
from ..core.references import follow_reference, may_carry_code, references_in
from .spec_types import (
    COMMANDS,
    DEFAULT_MAX_TRIALS,
    DISTRIBUTIONS,
    FORBIDDEN_KEYS,
    GOALS,
    PRUNERS,
    SAMPLERS,
    SPECIAL_KEYS,
    TOP_KEYS,
    Axis,
    AxisValue,
    Collect,
    OptunaSpec,
    RandomParam,
    RandomSpace,
    RaySpec,
    ReportSpec,
    SweepSpec,
    SweepSpecError,
    default_goal,
    is_number,
)

__all__ = ["SweepParser"]

_KEY_PATH = re.compile(r"^[A-Za-z_][\w-]*(\.[\w-]+)*$")
_FLAG = re.compile(r"^--[A-Za-z][\w.-]*$")


def _files_of(file: Path) -> dict[str, Path]:
    """The files of a sweep file's ``_base_`` chain by the name its origins show them with
    (``display_path``), so a key's origin tells which file said it. The chain was read and
    checked by :func:`load_config` already; an entry that does not read back is left out."""
    import yaml

    found: dict[str, Path] = {}
    pending = [file]
    while pending and len(found) <= MAX_CONFIG_FILES:
        current = pending.pop()
        try:
            current = current.expanduser().resolve()
            if display_path(current) in found:
                continue
            found[display_path(current)] = current
            data = yaml.safe_load(current.read_text(encoding="utf-8"))
        except (OSError, RuntimeError, ValueError, yaml.YAMLError):
            continue
        bases = data.get(BASE_KEY) if isinstance(data, dict) else None
        for base in [bases] if isinstance(bases, str) else bases if isinstance(bases, list) else []:
            if isinstance(base, str) and base.strip():
                pending.append(Path(base) if os.path.isabs(os.path.expanduser(base)) else current.parent / base)
    return found


class SweepParser:
    """Checks one sweep file; every error is located with the config's origins."""

    def __init__(self, cfg: Config, *, stored: bool = False, config_roots: Iterable[str | os.PathLike] = (),
                 max_trials: int = DEFAULT_MAX_TRIALS):  # fmt: skip
        self.cfg, self.stored, self.max_trials = cfg, stored, max_trials
        self.shown = display_path(cfg.file) if cfg.file else "the sweep"
        self.files = _files_of(cfg.file) if cfg.file else {}
        home = [cfg.file.parent] if cfg.file else []
        self.roots = [Path(os.path.abspath(os.path.expanduser(r))).resolve() for r in (*home, *config_roots)]

    def said_in(self, path: str) -> Path:
        """The folder of the file (the sweep file or one of its ``_base_`` files) that set ``path``:
        what its relative paths are relative to."""
        origin = self.cfg.where(path) or ""
        shown, _, line = origin.rpartition(":")
        file = self.files.get(shown if line.isdigit() else origin)
        return file.parent if file is not None else self.cfg.base_dir

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
        default = "optuna" if data.get("optuna") is not None else "random" if random is not None else "grid"
        search = data.get("search", default)
        if not isinstance(search, str):
            raise self.fail("search", f"expected the name of a search, got {search!r}")
        if not grid and random is None and search in ("grid", "random") and seeds is None:
            raise self.fail("grid", "the sweep has nothing to vary: give a grid, a random space or seeds")
        self.check_count(grid, random, seeds)
        collect = self.collect(data.get("collect"))
        report = self.report(data.get("report"), name)
        optuna = self.optuna(data.get("optuna"), search, collect, grid, random, seeds, config)
        ray = self.ray(data.get("ray"))
        if optuna is not None and optuna.trials > self.max_trials:
            raise self.fail("optuna.trials", f"the sweep plans {optuna.trials:,} trials, more than the limit of "
                            f"{self.max_trials:,}; shrink it, or raise the limit with --max-trials N")  # fmt: skip
        resolved = copy.deepcopy(data)  # as stored in the sweep folder: config paths absolute, axes named
        if isinstance(resolved.get("ray"), dict):
            resolved["ray"].pop("address", None)
        resolved["name"] = name
        if config is not None:
            resolved["config"] = config
        if grid:
            resolved["grid"] = {axis.name: {v.label: dict(v.overrides) for v in axis.values} for axis in grid}
        return SweepSpec(
            file=self.cfg.file or Path("sweep.yaml"), name=name, config=config, command=command,
            overrides=overrides, grid=grid, random=random, seeds=seeds, search=search, collect=collect,
            report=report, data=resolved, optuna=optuna, ray=ray,
        )  # fmt: skip

    # ---------------------------------------------------------------- pieces
    def config_path(self, value: Any, path: str) -> str:
        """A ``config:`` value: relative to the file that says it, and (for a sweep to run)
        lying beside the sweep file the user gave or in a folder the user named."""
        if not isinstance(value, str) or not value.strip() or "\x00" in value:
            raise self.fail(path, f"expected a config file path, got {value!r}")
        file = follow_reference("sweep.config", value, origin=self.cfg.where(path), said_in=self.said_in(path),
                                stored=self.stored, vouch_root=self.roots[0] if self.roots else None).path  # fmt: skip
        if self.stored:
            return os.path.abspath(file)
        try:
            real = file.resolve()
        except (OSError, RuntimeError):
            raise self.fail(path, f"config file '{value}': a link on its way loops") from None
        if not real.is_file():
            raise self.fail(path, f"config file '{value}' not found (looked for {display_path(file)})")
        if not any(real.is_relative_to(root) for root in self.roots):
            raise self.fail(path, f"config file '{value}' does not lie beside the sweep file {self.shown} (in its "
                            f"folder or below), so the sweep file cannot vouch for it and its plug-ins; move it "
                            f"there, or name its folder with --config-root {display_path(real.parent)}")  # fmt: skip
        return str(real)

    def check_key(self, key: str, where: str) -> None:
        """Refuse an override key that only the user's command line may set."""
        name = key.split("=", 1)[0]
        reason = FORBIDDEN_KEYS.get(name) or (FORBIDDEN_KEYS["plugins"] if name.startswith("plugins.") else None)
        if reason:
            raise self.fail(where, f"'{name}' cannot be set by a sweep file ({reason}); give it on the command line "
                            "of the run you mean, not in the sweep")  # fmt: skip

    def check_flag_value(self, key: str, value: Any, where: str) -> None:
        """Refuse a flag's value that a trial's command line would read as another flag
        (``--algorithm: --plugins=evil.py``); negative numbers are values."""
        if not key.startswith("--"):
            return
        for item in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(item, str) and item.startswith("-") and not is_number(item):
                raise self.fail(where, f"the value {item!r} of {key} starts with '-' and would read as another "
                                "flag on the trial's command line; refused")  # fmt: skip

    def check_references(self, key: str, value: Any, where: str) -> None:
        """A file a trial's override points at that can vouch for plug-ins (a teacher's config) must
        lie where ``config:`` may: beside the sweep file or under ``--config-root``. On the trial's
        command line it reads as typed by the user (:mod:`modforge.core.references`), so the sweep
        file — which vouches only for its own folder — checks it here, relative to the folder the
        trials run in (the current one). Run folders, checkpoints and weights carry no code of theirs."""
        if self.stored:
            return
        for kind, text in references_in(key, value):
            if not isinstance(text, str) or not text.strip() or "\x00" in text:
                continue  # validated where the trial reads it
            ref = follow_reference(kind, text, origin=CommandLineOrigin(where), said_in=None, stored=False,
                                   vouch_root=None)  # fmt: skip
            try:
                real = ref.path.resolve()
            except (OSError, RuntimeError):
                raise self.fail(where, f"{kind} '{text}': a link on its way loops") from None
            if may_carry_code(real) and not any(real.is_relative_to(root) for root in self.roots):
                raise self.fail(where, f"{kind} '{text}' is a config file outside the folder of the sweep file "
                                f"{self.shown}, so the sweep file cannot vouch for it and its plug-ins; move it "
                                f"there, or name its folder with --config-root {display_path(real.parent)}")  # fmt: skip

    def check_count(self, grid: tuple[Axis, ...], random: RandomSpace | None, seeds: tuple[int, ...] | None) -> None:
        """Refuse a sweep planning more than ``max_trials`` trials, before any is made."""
        points = math.prod(len(axis.values) for axis in grid)
        draws = random.trials if random is not None else 1
        planned = points * draws * (len(seeds) if seeds else 1)
        if planned > self.max_trials:
            where = "random.trials" if random is not None and draws > self.max_trials else "grid" if grid else "seeds"
            raise self.fail(where, f"the sweep plans {planned:,} trials ({points:,} grid points × {draws:,} random "
                            f"draws × {len(seeds) if seeds else 1} seeds), more than the limit of "
                            f"{self.max_trials:,}; shrink it, or raise the limit with --max-trials N")  # fmt: skip

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
            else:
                self.check_key(key, where)
                self.check_flag_value(key, item, where)
                self.check_references(key, item, where)
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
                    for i, v in enumerate(spec):
                        self.check_flag_value(str(name), v, f"{path}.{i}")
                        self.check_references(str(name), v, f"{path}.{i}")
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
        return RandomSpace(trials, seed, self.space(spec.get("space"), "random.space"))

    def space(self, value: Any, where: str) -> tuple[RandomParam, ...]:
        """A search space (``random.space``, ``optuna.space``): KEY → {uniform|loguniform|int|choice: ...}."""
        params = []
        for key, dist in self.mapping(value, where).items():
            path = f"{where}.{key}"
            self.overrides({key: None}, where, special=False)
            if not isinstance(dist, dict) or len(dist) != 1 or next(iter(dist)) not in DISTRIBUTIONS:
                raise self.fail(path, f"expected one of {{{': ..., '.join(DISTRIBUTIONS)}: ...}}, got {dist!r}")
            kind, args = next(iter(dist.items()))
            params.append(RandomParam(key, kind, self.distribution(kind, args, f"{path}.{kind}")))
            if kind == "choice":
                self.check_flag_value(str(key), list(args), f"{path}.{kind}")
                self.check_references(str(key), list(args), f"{path}.{kind}")
        if not params:
            raise self.fail(where, "expected at least one KEY: {uniform|loguniform|int|choice: ...}")
        return tuple(params)

    def whole(self, spec: dict[str, Any], key: str, path: str, default: int, low: int) -> int:
        value = spec.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise self.fail(f"{path}.{key}", f"expected an integer ≥ {low}, got {value!r}")
        return value

    def optuna(self, value: Any, search: str, collect: tuple[Collect, ...], grid: tuple[Axis, ...],
               random: RandomSpace | None, seeds: tuple[int, ...] | None, config: str | None) -> OptunaSpec | None:  # fmt: skip
        if value is None:
            if search == "optuna":
                raise self.fail("optuna", "required with search: optuna: {trials: N, metric: NAME, space: {...}}")
            return None
        if search != "optuna":
            raise self.fail("optuna", f"the optuna section is only used with search: optuna (search is '{search}')")
        spec = self.mapping(value, "optuna")
        fields = [f.name for f in dataclasses.fields(OptunaSpec) if f.name != "params"] + ["space"]
        check_keys(spec, fields, path="optuna", origin_of=self.cfg.where)
        if grid or random is not None:
            raise self.fail("grid" if grid else "random", "search: optuna takes its values from optuna.space; "
                            "drop grid/random (fixed settings go under overrides)")  # fmt: skip
        if config is None:
            raise self.fail("config", "required with search: optuna: the base config file")
        if seeds is not None and len(seeds) > 1:
            raise self.fail("seeds", f"search: optuna runs each trial with one seed (the objective is that run's "
                            f"value), got {list(seeds)}; give one seed, then run the best settings over seeds "
                            "with a grid sweep")  # fmt: skip
        trials = self.whole(spec, "trials", "optuna", 0, 1) if "trials" in spec else None
        if trials is None:
            raise self.fail("optuna.trials", "required: how many trials the study runs")
        names = {c.name: c for c in collect}
        metric = spec.get("metric")
        if metric not in names:
            raise self.fail("optuna.metric", f"expected one of the collected names ({', '.join(names)}), "
                            f"got {metric!r}")  # fmt: skip
        goal = spec.get("goal", names[metric].goal)
        if goal not in ("max", "min"):
            raise self.fail("optuna.goal", f"expected max or min, got {goal!r}")
        sampler, pruner = spec.get("sampler", "tpe"), spec.get("pruner", "median")
        if sampler not in SAMPLERS:
            raise self.fail("optuna.sampler", f"expected one of {', '.join(SAMPLERS)}, got {sampler!r}")
        if pruner not in PRUNERS:
            raise self.fail("optuna.pruner", f"expected one of {', '.join(PRUNERS)}, got {pruner!r}")
        seed = spec.get("seed", 0)
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise self.fail("optuna.seed", f"expected an integer seed, got {seed!r}")
        prune_on = spec.get("prune_on")
        if prune_on is not None and (not isinstance(prune_on, str) or not prune_on):
            raise self.fail("optuna.prune_on", f"expected a per-epoch metric such as val_accuracy, got {prune_on!r}")
        return OptunaSpec(
            trials=trials, params=self.space(spec.get("space"), "optuna.space"), metric=metric, goal=goal,
            sampler=sampler, seed=seed, startup_trials=self.whole(spec, "startup_trials", "optuna", 5, 0),
            pruner=pruner, prune_on=prune_on, warmup_epochs=self.whole(spec, "warmup_epochs", "optuna", 1, 0),
        )  # fmt: skip

    def ray(self, value: Any) -> RaySpec | None:
        if value is None:
            return None
        spec = self.mapping(value, "ray")
        check_keys(spec, [f.name for f in dataclasses.fields(RaySpec)], path="ray", origin_of=self.cfg.where)
        if spec.get("address") is not None and not self.stored:  # a stored one is never connected to
            raise self.fail("ray.address", "a sweep file does not choose the Ray cluster to connect to (a cluster's "
                            "head can run code in this process); give --ray-address ADDR on the command line")  # fmt: skip
        amounts = {}
        for key, low in (("cpus_per_trial", 0.0), ("gpus_per_trial", 0.0)):
            amount = spec.get(key, getattr(RaySpec, key))
            if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not amount >= low \
                    or not math.isfinite(amount) or (key == "cpus_per_trial" and amount <= 0):  # fmt: skip
                raise self.fail(f"ray.{key}", f"expected a number {'> 0' if key == 'cpus_per_trial' else '≥ 0'}, "
                                f"got {amount!r}")  # fmt: skip
            amounts[key] = float(amount)
        return RaySpec(None, max_retries=self.whole(spec, "max_retries", "ray", 2, 0), **amounts)

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
