"""Optimizers and schedulers from config specs, with per-parameter-group options.

``train.optimizer.param_groups`` is a list of ``{select: [...], args: {...}}``; each
parameter goes to the first group whose ``select`` matches it — ``bias`` (any bias),
``norm`` (parameters of normalisation layers) or a shell pattern on the parameter name
(``backbone.*``) — and every other parameter to the default group. The classic "no weight
decay on norms and biases" is ``{select: [bias, norm], args: {weight_decay: 0.0}}``.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import logging
from collections.abc import Callable
from typing import Any

import torch.nn as nn

from ..core.errors import ConfigValueError
from ..core.registries import OPTIMIZERS, SCHEDULERS

__all__ = ["NORM_TYPES", "SchedulePlan", "build_optimizer", "build_scheduler", "group_parameters", "plan_schedule"]

log = logging.getLogger("modforge.train")

NORM_TYPES = (nn.modules.batchnorm._NormBase, nn.LayerNorm, nn.GroupNorm, nn.LocalResponseNorm, nn.RMSNorm)


def _norm_parameter_ids(model: nn.Module) -> set[int]:
    return {id(p) for m in model.modules() if isinstance(m, NORM_TYPES) for p in m.parameters(recurse=False)}


def _matches(selector: str, name: str, param: Any, norm_ids: set[int]) -> bool:
    if selector == "bias":
        return name == "bias" or name.endswith(".bias")
    if selector == "norm":
        return id(param) in norm_ids
    return fnmatch.fnmatchcase(name, selector)


def group_parameters(
    model: nn.Module,
    groups: list[dict[str, Any]],
    path: str = "train.optimizer",
    origin_of: Callable[[str], str | None] | None = None,
) -> list[dict[str, Any]]:
    """Torch parameter groups: one per configured group (in order), then the rest."""
    where = origin_of or (lambda _p: None)
    norm_ids = _norm_parameter_ids(model)
    buckets: list[list[Any]] = [[] for _ in groups]
    rest = []
    for i, group in enumerate(groups):
        select = group.get("select")
        if isinstance(select, str):
            group["select"] = [select]
        elif not isinstance(select, list) or not select or not all(isinstance(s, str) for s in select):
            gpath = f"{path}.param_groups.{i}.select"
            raise ConfigValueError(
                f"expected a list of 'bias', 'norm' or name patterns, got {select!r}", path=gpath, source=where(gpath)
            )
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        for i, group in enumerate(groups):
            if any(_matches(s, name, param, norm_ids) for s in group["select"]):
                buckets[i].append(param)
                break
        else:
            rest.append(param)
    out = []
    for i, (group, params) in enumerate(zip(groups, buckets, strict=True)):
        if not params:
            log.warning("%s.param_groups.%d selects no parameters (%s)", path, i, ", ".join(group["select"]))
            continue
        out.append({"params": params, **group.get("args", {})})
    if rest:
        out.append({"params": rest})
    return out


def build_optimizer(
    spec: dict[str, Any],
    model: nn.Module,
    *,
    path: str = "train.optimizer",
    origin_of: Callable[[str], str | None] | None = None,
):
    """The optimizer for ``model`` from ``{type, args, param_groups}``."""
    where = origin_of or (lambda _p: None)
    groups_cfg = [dict(g) for g in (spec.get("param_groups") or [])]
    _obj, sig = OPTIMIZERS.resolve(spec["type"], path=f"{path}.type", source=where(f"{path}.type"))
    for i, group in enumerate(groups_cfg):
        unknown = set(group) - {"select", "args"}
        if unknown:
            gpath = f"{path}.param_groups.{i}"
            raise ConfigValueError(
                f"a parameter group has 'select' and 'args', got also {sorted(unknown)}",
                path=gpath,
                source=where(gpath),
            )
        group["args"] = sig.validate(group.get("args") or {}, path=f"{path}.param_groups.{i}.args", origin_of=where)
    params = group_parameters(model, groups_cfg, path, where) if groups_cfg else model.parameters()
    return OPTIMIZERS.build(
        {"type": spec["type"], "args": spec.get("args", {})}, path=path, origin_of=where, params=params
    )


@dataclasses.dataclass(frozen=True)
class SchedulePlan:
    """How a run's learning-rate schedule is stepped.

    Attributes:
        interval: when the trainer steps it — ``"epoch"`` or ``"step"`` (every optimizer step).
        total_steps: the schedule's length in that unit.
        warmup_unit: optimizer steps per unit of the config's warm-up (the steps of an epoch
            when the config counts epochs and the schedule counts optimizer steps, else 1).
    """

    interval: str
    total_steps: int
    warmup_unit: int = 1


def plan_schedule(spec: dict[str, Any] | None, *, epochs: int, steps_per_epoch: int,
                  max_steps: int | None = None) -> SchedulePlan:  # fmt: skip
    """The plan for ``train.scheduler`` over ``epochs`` of ``steps_per_epoch`` optimizer steps.

    A schedule whose class says ``counts_optimizer_steps`` (``warmup_cosine``) moves every
    optimizer step even when the config says ``interval: epoch`` — its epochs are converted —
    so no epoch is spent at a warm-up's starting rate. Any other schedule is stepped in the
    config's unit, as torch's schedulers expect.
    """
    steps_per_epoch = max(1, steps_per_epoch)
    run_steps = max_steps or epochs * steps_per_epoch
    interval = (spec or {}).get("interval", "epoch")
    if not spec:
        return SchedulePlan(interval, run_steps)
    if interval == "epoch" and getattr(SCHEDULERS.get(spec["type"]), "counts_optimizer_steps", False):
        return SchedulePlan("step", run_steps, steps_per_epoch)
    return SchedulePlan(interval, epochs if interval == "epoch" else run_steps)


def build_scheduler(
    spec: dict[str, Any] | None,
    optimizer,
    *,
    plan: SchedulePlan,
    path: str = "train.scheduler",
    origin_of: Callable[[str], str | None] | None = None,
):
    """The LR scheduler from ``{type, args, interval, monitor}`` (None when not configured),
    planned by :func:`plan_schedule`."""
    if not spec:
        return None
    return SCHEDULERS.build(
        {"type": spec["type"], "args": spec.get("args", {})},
        path=path,
        origin_of=origin_of,
        optimizer=optimizer,
        total_steps=plan.total_steps,
        warmup_unit=plan.warmup_unit,
    )
