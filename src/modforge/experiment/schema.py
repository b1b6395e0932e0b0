"""What a modforge config may contain, and the check that runs before anything is built.

The config is plain YAML; this module knows its layout: the top-level sections and the
*part slots* — places where a config names a registered part (``model.backbone``,
``model.losses``...).  :func:`validate_config` checks every slot against its registry
(name, argument names, argument types, required arguments) and rewrites it in normal
form (``{type, args}`` with coerced values), so a mistake is reported before any
tensor is allocated, with the key path and the file it came from.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from ..core.config import Config, check_keys, require_mapping
from ..core.errors import ConfigValueError
from ..core.plugins import load_config_plugins
from ..core.registries import DATASETS, REGISTRIES
from ..model.spec import parse_model_section

__all__ = ["PART_SLOTS", "SECTIONS", "PartSlot", "apply_overrides", "normalize_slots", "validate_config"]

SECTIONS = ("plugins", "seed", "task", "data", "model", "train")
"""Top-level keys every config may have; a registered task may own one more (the continual
task's ``continual:``, :attr:`modforge.tasks.base.Task.section`)."""


@dataclasses.dataclass(frozen=True)
class PartSlot:
    """A place in the config that names a registered part.

    Attributes:
        path: dotted config path (``model.backbone``).
        kind: registry kind (``backbone``).
        flag: command-line option that selects the part (``backbone`` → ``--backbone``),
            or ``None`` when it cannot be chosen by flag.
        many: the slot holds a list of parts (``model.losses``).
        extras: keys allowed beside ``type``/``args`` (a loss's ``weight``).
    """

    path: str
    kind: str
    flag: str | None = None
    many: bool = False
    extras: tuple[str, ...] = ()


PART_SLOTS: tuple[PartSlot, ...] = (
    PartSlot("model.frontend", "frontend", flag="frontend"),
    PartSlot("model.backbone", "backbone", flag="backbone"),
    PartSlot("model.neck", "neck", flag="neck"),
    PartSlot("model.head", "head", flag="head"),
    PartSlot("model.losses", "loss", many=True, extras=("weight", "name")),
    PartSlot("continual.algorithm", "algorithm", flag="algorithm"),
)


def normalize_slots(cfg: Config, slots: Iterable[PartSlot] = PART_SLOTS) -> Config:
    """Expand shorthand part specs in place (``head: linear`` → ``{type: linear, args: {}}``),
    so later overrides and flags can address ``model.head.args.*``. Values that are not
    a string or a mapping are left for :func:`validate_config` to report."""
    for slot in slots:
        value = cfg.get(slot.path, None)
        if slot.many:
            if isinstance(value, list):
                for i, item in enumerate(value):
                    if isinstance(item, str) and item.strip():
                        value[i] = {"type": item.strip(), "args": {}}
            continue
        if isinstance(value, str) and value.strip():
            _assign(cfg, slot.path, {"type": value.strip(), "args": {}})
        elif isinstance(value, dict) and value.get("args") is None and "type" in value:
            value["args"] = {}
    return cfg


def apply_overrides(cfg: Config, overrides: Iterable[str], slots: Iterable[PartSlot] = PART_SLOTS) -> Config:
    """Apply ``key.path=value`` overrides one by one, expanding shorthand specs around each,
    so ``model.head=mlp model.head.args.hidden=64`` works as written."""
    slots = tuple(slots)
    normalize_slots(cfg, slots)
    for text in overrides:
        cfg.apply_overrides([text])
        normalize_slots(cfg, slots)
    return cfg


def _check_seed(cfg: Config) -> None:
    seed = cfg.data.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ConfigValueError(f"expected int or None, got {seed!r}", path="seed", source=cfg.where("seed"))


def _check_task(cfg: Config, owned: dict[str, type]) -> None:
    """``task:`` names a registered task, agrees with any task section the config has, and
    that section is valid (the owning task's :meth:`~modforge.tasks.base.Task.check_config`)."""
    from ..core.registries import TASKS

    task = cfg.data.get("task")
    if task is not None and (not isinstance(task, str) or task not in TASKS):
        import difflib

        close = difflib.get_close_matches(str(task), TASKS.list(), n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise ConfigValueError(
            f"unknown task {task!r}{hint} (one of {', '.join(TASKS.list())}; a plug-in adds one with register_task)",
            path="task", source=cfg.where("task"),
        )
    for section, owner in owned.items():
        if cfg.data.get(section) is None:
            continue
        if task is not None and TASKS.get(task) is not owner:
            raise ConfigValueError(
                f"the '{section}:' section belongs to the '{owner.name}' task, but task: is '{task}'; "
                f"remove one of them", path=section, source=cfg.where(section),
            )
        owner().check_config(cfg)


def _check_weight(item: dict[str, Any], path: str, cfg: Config) -> None:
    weight = item.get("weight", 1.0)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)):
        raise ConfigValueError(
            f"expected a number, got {weight!r}", path=f"{path}.weight", source=cfg.where(f"{path}.weight")
        )


def validate_config(
    cfg: Config, *, allowed_modules: Iterable[str] = (), slots: Iterable[PartSlot] = PART_SLOTS
) -> Config:
    """Import the config's plug-ins, check ``cfg`` and normalize every part slot in place.

    Args:
        cfg: the loaded config (overrides already applied).
        allowed_modules: plug-in modules whose objects a ``type:`` may name by import path
            (in addition to the config's own ``plugins:``).
        slots: the part slots to check.

    Raises:
        ConfigError: the first problem found, located by key path and source.
    """
    where = cfg.where
    load_config_plugins(cfg.plugins, sources=cfg.plugin_sources, origin=f"plugins: in {where('plugins') or 'the config'}")
    from ..tasks.base import sectioned_tasks

    owned = sectioned_tasks(reserved=SECTIONS)  # after the plug-ins: a plug-in task may own a section too
    check_keys(cfg.data, (*SECTIONS, *owned), what="section", origin_of=where)
    _check_seed(cfg)
    _check_task(cfg, owned)
    allowed = [*cfg.plugins, *allowed_modules]
    common = dict(origin_of=where, allowed_modules=allowed, base_dir=str(cfg.base_dir))
    model = cfg.data.get("model")
    if model is not None:
        stages, _losses = parse_model_section(require_mapping(model, path="model", origin_of=where), origin_of=where)
        if model.get("init") is not None and not cfg.stored:  # a stored config's weights come from its checkpoint
            from ..model.init import parse_init

            parse_init(model["init"], origin_of=where, base_dir=cfg.base_dir)
        if "stages" in model:
            for i, stage in enumerate(stages):
                raw = model["stages"][i]
                spec = REGISTRIES[stage.kind].validate(raw, path=stage.path, extras=("name", "kind", "prev"), **common)
                model["stages"][i] = spec
    from .settings import validate_data_section, validate_train_section

    if cfg.data.get("data") is not None:
        cfg.data["data"] = validate_data_section(cfg)
        if isinstance(cfg.data.get("model"), dict):
            from ..model.wiring import check_class_count

            check_class_count(cfg.data["model"], declared_class_count(cfg.data["data"]), origin_of=where)
    if cfg.data.get("train") is not None:
        cfg.data["train"] = validate_train_section(cfg)
    for slot in slots:
        value = cfg.get(slot.path, None)
        if value is None:
            continue
        registry = REGISTRIES[slot.kind]
        if slot.many:
            items = value if isinstance(value, list) else [value]
            _assign(
                cfg,
                slot.path,
                [
                    registry.validate(item, path=f"{slot.path}.{i}", extras=slot.extras, **common)
                    for i, item in enumerate(items)
                ],
            )
        else:
            _assign(cfg, slot.path, registry.validate(value, path=slot.path, extras=slot.extras, **common))
    return cfg


def _assign(cfg: Config, path: str, value: Any) -> None:
    """Replace a value without touching the origins recorded for it."""
    parent_path, _, key = path.rpartition(".")
    parent = cfg.get(parent_path) if parent_path else cfg.data
    parent[key] = value


def declared_class_count(data: dict[str, Any]) -> int | None:
    """The class count a dataset states without loading anything: its registered object's
    ``num_classes`` attribute, else its own ``num_classes`` argument (the config's value or the
    signature's default), else None."""
    kind = str(data.get("type"))
    if kind not in DATASETS:  # an unknown type was reported by the data section's validation
        return None
    declared = getattr(DATASETS.get(kind), "num_classes", None)
    if declared is None:
        arg = DATASETS.signature(kind).get("num_classes")
        declared = (data.get("args") or {}).get("num_classes", arg.default) if arg is not None else None
    return declared if isinstance(declared, int) and not isinstance(declared, bool) else None
