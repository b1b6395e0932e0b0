"""A trial: one point of the search with one seed, and its stable, readable id."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from typing import Any

__all__ = ["Trial", "assign_ids", "format_value"]

_MAX_ID = 60
_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")


@dataclasses.dataclass(frozen=True)
class Trial:
    """One run of the sweep.

    Attributes:
        params: column → shown value (a grid axis's label, a random key's drawn value), in order;
            the seed is not among them (trials that differ only by seed form one group).
        overrides: everything the trial sets, in order (``KEY.PATH``/``--flag`` → value, and the
            special ``config``/``command``), fixed overrides first.
        seed: ``--seed`` (``None``: the config's own seed).
        id_parts: the pieces of the readable id (``er``, ``lr0.01``).
        id: the trial's id, set by :func:`assign_ids` (stable: derived from what the trial sets).
        extra: overrides the search adds for its own use (the optuna pruning callback): given to
            a fresh trial's command, but not what the user set — not in ``trials.csv``'s
            ``overrides`` column, the fingerprint, or the check that a finished trial is unchanged.
    """

    params: dict[str, Any]
    overrides: dict[str, Any]
    seed: int | None
    id_parts: tuple[str, ...] = ()
    id: str = ""
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def group(self) -> tuple[tuple[str, str], ...]:
        """What identifies the trial's group over seeds: every parameter but the seed."""
        return tuple((k, format_value(v)) for k, v in self.params.items())

    def fingerprint(self) -> str:
        """A short hash of everything the trial sets (settles id collisions)."""
        text = json.dumps([self.overrides, self.seed], sort_keys=False, default=str)
        return hashlib.sha1(text.encode()).hexdigest()[:8]


def format_value(value: Any) -> str:
    """A parameter value as tables and ids show it (floats with 4 significant digits)."""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, bool) or value is None:
        return str(value).lower()
    return str(value)


def _id_of(trial: Trial) -> str:
    parts = [*trial.id_parts, *([f"seed{trial.seed}"] if trial.seed is not None else [])]
    text = _UNSAFE.sub("_", "-".join(p for p in parts if p)).strip("._-") or "trial"
    if len(text) > _MAX_ID:
        text = f"{text[: _MAX_ID - 9].rstrip('._-')}-{trial.fingerprint()}"
    return text


def assign_ids(trials: list[Trial], taken: dict[str, str] | None = None) -> list[Trial]:
    """``trials`` with their ids: readable (``er-seed1``, ``lr0.01-type-mlp-seed0``), made of the
    trial's parameters and seed; a fingerprint is appended where two trials would share one.

    Args:
        trials: trials without ids.
        taken: id → fingerprint of trials named before (a lazily asked search names trials one
            at a time); updated in place.
    """
    taken = {} if taken is None else taken
    counts: dict[str, int] = {}
    for trial in trials:
        counts[_id_of(trial)] = counts.get(_id_of(trial), 0) + 1
    out = []
    for trial in trials:
        name = _id_of(trial)
        if counts[name] > 1 or taken.get(name, trial.fingerprint()) != trial.fingerprint():
            name = f"{name}-{trial.fingerprint()}"
        taken[name] = trial.fingerprint()
        out.append(dataclasses.replace(trial, id=name))
    return out
