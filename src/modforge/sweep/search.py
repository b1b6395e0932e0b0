"""Searches: what to run next. Grid and random are built in; others register in :data:`SEARCHES`.

The seam is :class:`Search`: the sweep asks for one trial at a time whenever a worker is
free and tells the search every result, so a search may decide each trial from the results
so far (Bayesian optimisation, ask/tell) instead of precomputing a list::

    search = SEARCHES["grid"](spec, sweep_dir)
    trial = search.ask()            # a Trial, or None: nothing to start now
    search.tell(trial, result)      # every finished (or skipped-as-finished) trial

The sweep ends when nothing is running and :meth:`Search.ask` returns ``None``. A search
that keeps state (a study database) keeps it in ``sweep_dir`` so a re-run continues it;
grid and random need none — they are reproducible from the sweep file.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

from .factories import adds_to
from .spec import RandomSpace, SweepSpec, is_number
from .trial import Trial, assign_ids, format_value

__all__ = ["SEARCHES", "ListSearch", "Search", "TrialResult", "draw_random", "grid_points", "register_search"]


@dataclasses.dataclass(frozen=True)
class TrialResult:
    """What a search is told about a trial that ended.

    Attributes:
        status: ``done``, ``pruned`` (finished early: the optuna study stopped it; see
            :mod:`.optuna_search`) or ``failed`` (``interrupted`` trials are not told: they run again).
        metrics: the collected values (``None`` where a value is missing).
        summary: the run's whole ``summary.json`` (empty when it failed).
        run_dir: the trial's run folder (its ``metrics.csv`` holds the per-epoch curve).
    """

    status: str
    metrics: dict[str, float | None]
    summary: dict[str, Any]
    run_dir: Path


class Search(Protocol):
    """Chooses trials one at a time (see the module docstring)."""

    total: int | None
    """How many trials the search will ask in all (``None``: not known in advance); for progress."""

    def ask(self) -> Trial | None:
        """The next trial to start (with its id), or ``None`` when there is nothing to start now."""
        ...

    def tell(self, trial: Trial, result: TrialResult) -> None:
        """A trial this search asked for ended (or had ended in an earlier run of the sweep)."""
        ...


SearchFactory = Callable[[SweepSpec, Path], Search]
SEARCHES: dict[str, SearchFactory] = {}
"""Search name (the sweep file's ``search:``) → factory ``(spec, sweep_dir) -> Search``."""


def register_search(name: str) -> Callable[[SearchFactory], SearchFactory]:
    """Register a search under ``name`` (``search: NAME`` in a sweep file)."""
    return adds_to(SEARCHES, name)


def grid_points(spec: SweepSpec) -> list[tuple[dict[str, Any], dict[str, Any], tuple[str, ...]]]:
    """The grid's points in file order: (params, overrides, id parts) of each combination."""
    points = []
    for combo in itertools.product(*(axis.values for axis in spec.grid)):
        params, overrides, parts = {}, {}, []
        for axis, value in zip(spec.grid, combo, strict=True):
            params[axis.name] = value.label
            overrides.update(value.overrides)
            plain = list(value.overrides) == [axis.name] and is_number(value.label)
            parts.append(f"{_short(axis.name)}{value.label}" if plain else value.label)
        points.append((params, overrides, tuple(parts)))
    return points


def draw_random(space: RandomSpace, index: int) -> dict[str, Any]:
    """Draw ``index`` of the random space: the same values for the same seed and index,
    whatever the number of trials (each draw has its own generator)."""
    rng = random.Random(f"modforge-sweep:{space.seed}:{index}")
    values: dict[str, Any] = {}
    for param in space.params:
        if param.kind == "choice":
            values[param.key] = param.args[rng.randrange(len(param.args))]
        elif param.kind == "int":
            values[param.key] = rng.randint(int(param.args[0]), int(param.args[1]))
        elif param.kind == "uniform":
            values[param.key] = rng.uniform(float(param.args[0]), float(param.args[1]))
        else:  # loguniform
            low, high = (math.log(float(a)) for a in param.args)
            values[param.key] = math.exp(rng.uniform(low, high))
    return values


class ListSearch:
    """Grid × random draws × seeds, in that nesting order, handed out one at a time; results
    change nothing (``grid`` and ``random`` are both this search)."""

    def __init__(self, spec: SweepSpec, sweep_dir: Path | None = None):
        self.spec = spec
        self.trials = assign_ids(list(self._expand()))
        self.total: int | None = len(self.trials)
        self._next = 0

    def _expand(self) -> Iterator[Trial]:
        space = self.spec.random
        draws = [draw_random(space, i) for i in range(space.trials)] if space is not None else [{}]
        for params, overrides, parts in grid_points(self.spec):
            for draw in draws:
                drawn_parts = tuple(f"{_short(k)}{format_value(v)}" for k, v in draw.items())
                for seed in self.spec.seeds or (None,):
                    yield Trial(
                        params={**params, **draw}, overrides={**self.spec.overrides, **overrides, **draw},
                        seed=seed, id_parts=(*parts, *drawn_parts),
                    )  # fmt: skip

    def ask(self) -> Trial | None:
        if self._next >= len(self.trials):
            return None
        self._next += 1
        return self.trials[self._next - 1]

    def tell(self, trial: Trial, result: TrialResult) -> None:
        """Grid and random search do not look at results."""


register_search("grid")(ListSearch)
register_search("random")(ListSearch)


def _short(key: str) -> str:
    """``train.optimizer.args.lr`` → ``lr``; ``--buffer-size`` → ``buffer-size``."""
    return key.lstrip("-").rpartition(".")[2]

