"""Config-time check of values the builder wires from the data (``num_classes``).

When a ``model:`` section sets ``num_classes`` in some part's ``args`` and the data's class
count is already known (a dataset that declares it, without loading anything), a mismatch
is refused when the config is validated — ``modforge config`` — with the key and the
count, instead of only when ``train`` builds the model.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..core.errors import ConfigError
from .spec import parse_model_section

__all__ = ["check_class_count"]


def check_class_count(
    model: Mapping[str, Any], num_classes: int | None, *, origin_of: Callable[[str], str | None] | None = None
) -> None:
    """Refuse a ``num_classes`` in any stage's or loss's ``args`` that differs from the data's.

    Args:
        model: the ``model:`` section.
        num_classes: the data's class count; ``None`` (not known before loading) checks nothing.
        origin_of: maps a key path to the file/override it came from.

    Raises:
        ConfigError: naming ``model.<stage>.args.num_classes``, both counts and the fix.
    """
    if num_classes is None:
        return
    where = origin_of or (lambda _p: None)
    stages, losses = parse_model_section(model, origin_of=where)
    for spec, path in [(s.spec, s.path) for s in stages] + [(loss.spec, loss.path) for loss in losses]:
        given = spec["args"].get("num_classes")
        if given is None or isinstance(given, bool):
            continue
        if given != num_classes:
            key = f"{path}.args.num_classes"
            raise ConfigError(
                f"the data has {num_classes} classes but the config sets num_classes: {given!r}; remove it from "
                "the config (the builder wires the data's class count into every part that takes num_classes)",
                path=key,
                source=where(key),
            )
