"""What the builder and the conformance suite read off a built part."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import torch.nn as nn

from ..components.layouts import Layout

__all__ = ["KIND_DEFAULT_ACCEPTS", "accepted_layouts", "declared_out_dim", "is_dict_io", "output_key", "takes_returnt"]

KIND_DEFAULT_ACCEPTS: dict[str, tuple[Layout, ...]] = {"head": (Layout.VECTOR,), "loss": (Layout.VECTOR,)}
"""Layouts assumed for a part that declares none: heads and losses take vectors; other
kinds take anything."""


def accepted_layouts(obj: Any, kind: str) -> tuple[Layout, ...]:
    """The layouts a part (class, function or instance) accepts; empty means any."""
    declared = getattr(obj, "accepts", None)
    if declared:
        return tuple(Layout(a) for a in declared)
    return KIND_DEFAULT_ACCEPTS.get(kind, ())


def takes_returnt(part: nn.Module) -> bool:
    """True for a Mammoth-style part whose ``forward`` has a ``returnt`` parameter."""
    try:
        return "returnt" in inspect.signature(part.forward).parameters
    except (TypeError, ValueError):
        return False


def is_dict_io(part: nn.Module) -> bool:
    """True for a UP-style part that takes and returns the batch dict (``dict_io = True``,
    or a ``forward`` whose first parameter is annotated as a mapping)."""
    if getattr(part, "dict_io", False):
        return True
    try:
        params = list(inspect.signature(part.forward).parameters.values())
    except (TypeError, ValueError):
        return False
    if not params:
        return False
    annotation = params[0].annotation
    return annotation in (dict, Mapping, "dict", "Mapping") or getattr(annotation, "__origin__", None) in (
        dict,
        Mapping,
    )


def output_key(part: nn.Module, kind: str) -> str:
    """The batch key a dict-io part's output is read from (``output_key``, default
    ``logits`` for heads and ``features`` otherwise)."""
    return getattr(part, "output_key", None) or ("logits" if kind == "head" else "features")


def declared_out_dim(part: nn.Module) -> Any:
    """``out_dim`` as declared (or UP's ``get_outplanes()``); None when not declared."""
    value = getattr(part, "out_dim", None)
    if value is None and callable(getattr(part, "get_outplanes", None)):
        value = part.get_outplanes()
    if isinstance(value, (list, tuple)):
        return [int(v) for v in value]
    return int(value) if value is not None else None
