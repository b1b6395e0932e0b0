"""Reading the ``model:`` section into stages and losses.

Two spellings, one result:

* the default chain — ``frontend``, ``backbone``, ``neck``, ``head`` (each optional except
  ``backbone``), wired in that order;
* the general form (United Perception's) — ``stages:``, a list of named stages, each with
  ``kind`` (defaults to its name when that is a kind), ``type``/``args`` and optionally
  ``prev`` naming an earlier stage to read from (default: the stage before it). A
  ``prev`` naming no earlier stage is an error (UP silently skips it).

Losses come from ``losses:``, each ``{type, args, weight, name}``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from ..core.config import check_keys
from ..core.errors import ConfigValueError, UnknownKeyError
from ..core.registries import REGISTRIES
from ..core.specs import normalize_spec
from .errors import ModelBuildError

__all__ = ["CHAIN", "LossSpec", "MODEL_KEYS", "RESERVED_KEYS", "StageSpec", "is_loss_key", "parse_model_section"]

CHAIN = ("frontend", "backbone", "neck", "head")
"""The default chain's stages, in order."""

MODEL_KEYS = (*CHAIN, "stages", "losses", "init")
"""Keys of the ``model:`` section."""

STAGE_KINDS = ("frontend", "backbone", "neck", "head")

RESERVED_KEYS = frozenset({"input", "label", "index", "logits", "embedding", "features", "loss", "full", "prediction"})
"""Batch keys with a fixed meaning; no stage may be named after one."""


def is_loss_key(key: str) -> bool:
    """The documented rule: ``loss``, ``loss_*`` and ``*_loss`` hold losses."""
    return key == "loss" or key.startswith("loss_") or key.endswith("_loss")


@dataclasses.dataclass
class StageSpec:
    """One stage: its name, registry kind, part spec and the stage it reads from."""

    name: str
    kind: str
    spec: dict[str, Any]
    prev: str | None
    path: str


@dataclasses.dataclass
class LossSpec:
    """One configured loss: its output key (``loss_<name>``), weight and part spec."""

    key: str
    weight: float
    spec: dict[str, Any]
    path: str


def _stage_from_chain(model: Mapping[str, Any], where: Callable[[str], str | None]) -> list[StageSpec]:
    stages: list[StageSpec] = []
    for name in CHAIN:
        value = model.get(name)
        if value is None:
            continue
        path = f"model.{name}"
        spec = normalize_spec(value, path=path, kind=name, origin_of=where)
        stages.append(StageSpec(name, name, spec, stages[-1].name if stages else None, path))
    if not any(s.kind == "backbone" for s in stages):
        raise ModelBuildError(
            "a model needs a backbone (model.backbone or a stage of kind backbone)", path="model", source=where("model")
        )
    return stages


def _stages_from_list(items: Any, where: Callable[[str], str | None]) -> list[StageSpec]:
    if not isinstance(items, list) or not items:
        raise ConfigValueError(
            f"expected a non-empty list of stages, got {items!r}", path="model.stages", source=where("model.stages")
        )
    stages: list[StageSpec] = []
    for i, item in enumerate(items):
        path = f"model.stages.{i}"
        if not isinstance(item, Mapping):
            raise ConfigValueError(
                f"expected a stage mapping {{name, type, args, prev}}, got {item!r}", path=path, source=where(path)
            )
        name = item.get("name")
        if not isinstance(name, str) or not name.strip():
            raise ConfigValueError(
                f"every stage needs a 'name' (a string), got {name!r}", path=f"{path}.name", source=where(path)
            )
        kind = item.get("kind", name if name in STAGE_KINDS else None)
        if kind not in STAGE_KINDS:
            raise ConfigValueError(
                f"stage '{name}' needs 'kind': one of {', '.join(STAGE_KINDS)} (got {kind!r})",
                path=f"{path}.kind",
                source=where(path),
            )
        spec = normalize_spec(item, path=path, kind=kind, extras=("name", "kind", "prev"), origin_of=where)
        prev = item.get("prev", stages[-1].name if stages else None)
        known = [s.name for s in stages]
        if prev is not None and prev != "input" and prev not in known:
            later = (
                " (stages may only read from earlier stages)"
                if any(it.get("name") == prev for it in items if isinstance(it, Mapping))
                else ""
            )
            raise ModelBuildError(
                f"stage '{name}' reads from prev '{prev}', which is not an earlier stage{later}; "
                f"earlier stages: {', '.join(known) or 'none'} (or 'input')",
                path=f"{path}.prev",
                source=where(f"{path}.prev"),
            )
        clean = {"type": spec["type"], "args": spec["args"]}
        stages.append(StageSpec(name, kind, clean, None if prev == "input" else prev, path))
    return stages


def _check_names(stages: list[StageSpec], where: Callable[[str], str | None]) -> None:
    seen: set[str] = set()
    for stage in stages:
        if stage.name in RESERVED_KEYS or is_loss_key(stage.name):
            raise ModelBuildError(
                f"stage name '{stage.name}' is reserved (batch keys {', '.join(sorted(RESERVED_KEYS))} and loss keys)",
                path=stage.path,
                source=where(stage.path),
            )
        if stage.name in seen:
            raise ModelBuildError(f"two stages are named '{stage.name}'", path=stage.path, source=where(stage.path))
        seen.add(stage.name)


def _losses(items: Any, where: Callable[[str], str | None]) -> list[LossSpec]:
    if items is None:
        return []
    if not isinstance(items, list):
        items = [items]
    losses: list[LossSpec] = []
    keys: set[str] = set()
    for i, item in enumerate(items):
        path = f"model.losses.{i}"
        spec = normalize_spec(item, path=path, kind="loss", extras=("weight", "name"), origin_of=where)
        weight = spec.pop("weight", 1.0)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)):
            raise ConfigValueError(
                f"expected a number, got {weight!r}", path=f"{path}.weight", source=where(f"{path}.weight")
            )
        name = spec.pop("name", None) or spec["type"]
        key = name if is_loss_key(name) else f"loss_{name}"
        base, n = key, 1
        while key in keys:
            key, n = f"{base}_{n}", n + 1
        keys.add(key)
        losses.append(LossSpec(key, float(weight), spec, path))
    return losses


def parse_model_section(
    model: Any, *, origin_of: Callable[[str], str | None] | None = None
) -> tuple[list[StageSpec], list[LossSpec]]:
    """Stages and losses of a ``model:`` mapping, checked for shape (not yet for parts).

    Raises:
        ConfigError: unknown keys, both spellings at once, a missing backbone, a bad
            ``prev``, a reserved or duplicate stage name, a malformed loss.
    """
    where = origin_of or (lambda _p: None)
    if not isinstance(model, Mapping):
        raise ConfigValueError(f"expected a mapping, got {model!r}", path="model", source=where("model"))
    check_keys(model, MODEL_KEYS, path="model", what="model key", origin_of=where)
    if "stages" in model and any(model.get(k) is not None for k in CHAIN):
        chain = [k for k in CHAIN if model.get(k) is not None]
        raise UnknownKeyError(
            f"use either 'stages:' or the chain keys, not both (found stages and {', '.join(chain)})",
            path="model",
            source=where("model"),
        )
    stages = _stages_from_list(model["stages"], where) if "stages" in model else _stage_from_chain(model, where)
    _check_names(stages, where)
    for stage in stages:
        if stage.kind not in REGISTRIES:  # pragma: no cover - STAGE_KINDS are all registries
            raise ModelBuildError(f"unknown stage kind {stage.kind!r}", path=stage.path)
    return stages, _losses(model.get("losses"), where)
