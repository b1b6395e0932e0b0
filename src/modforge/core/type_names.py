"""Human names for constrained annotations (``Annotated[float, Field(ge=0, le=1)]``).

pydantic checks the constraints; this module only says them in words, so an error reads
``expected a number in [0, 1], got -0.5`` instead of printing the annotation's repr, and a
``--help`` line or ``modforge describe`` row says what a value may be. It understands the
``annotated_types`` bounds (``Gt``, ``Ge``, ``Lt``, ``Le``, ``Interval``), ``MinLen``/``MaxLen``,
pydantic's ``allow_inf_nan`` and ``Field(...)`` carrying any of them — which covers
:mod:`modforge.core.constraints` and a user's own ``Annotated[float, Field(gt=0)]``.
"""

from __future__ import annotations

import typing
from typing import Annotated, Any

__all__ = ["constraints_of", "describe_constrained"]

_KEYS = ("gt", "ge", "lt", "le", "min_length", "max_length", "allow_inf_nan", "multiple_of")


def constraints_of(tp: Any) -> tuple[Any, dict[str, Any]]:
    """``(base type, {constraint: value})`` of an ``Annotated`` type (nested ones merged)."""
    found: dict[str, Any] = {}
    while typing.get_origin(tp) is Annotated:
        base, *metadata = typing.get_args(tp)
        _collect(metadata, found)
        tp = base
    return tp, found


def _collect(items: list[Any], found: dict[str, Any]) -> None:
    for item in items:
        nested = getattr(item, "metadata", None)  # a pydantic FieldInfo holds its constraints here
        if isinstance(nested, list):
            _collect(nested, found)
        for key in _KEYS:
            value = getattr(item, key, None)
            if value is not None and key not in found:
                found[key] = value


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _range(found: dict[str, Any]) -> str:
    """``in [0, 1]``, ``> 0``, ``>= 1``... from the bounds ('' without any)."""
    low = ("[", found["ge"]) if "ge" in found else ("(", found["gt"]) if "gt" in found else None
    high = ("]", found["le"]) if "le" in found else (")", found["lt"]) if "lt" in found else None
    if low and high:
        return f"in {low[0]}{_number(low[1])}, {_number(high[1])}{high[0]}"
    if low:
        return f"{'>=' if low[0] == '[' else '>'} {_number(low[1])}"
    if high:
        return f"{'<=' if high[0] == ']' else '<'} {_number(high[1])}"
    return ""


def describe_constrained(tp: Any, *, plural: bool = False) -> str:
    """``a number in [0, 1]``, ``a whole number > 0``, ``a finite number`` (``plural``:
    ``whole numbers > 0``, for ``list of …``); other bases: their name plus the constraints."""
    from .coercion import describe_type

    base, found = constraints_of(tp)
    bounds = _range(found)
    if base in (int, float):
        # a two-sided range already excludes inf and NaN; otherwise say "finite" when it is refused
        finite = base is float and found.get("allow_inf_nan") is False and not bounds.startswith("in ")
        noun = "whole number" if base is int else "finite number" if finite else "number"
        text = f"{noun}s {bounds}" if plural else f"a {noun} {bounds}"
        text = text.strip()
    else:
        text = describe_type(base)
        if bounds:
            text += f" {bounds}"
    if "multiple_of" in found:
        text += f", a multiple of {_number(found['multiple_of'])}"
    if "min_length" in found or "max_length" in found:
        low, high = found.get("min_length"), found.get("max_length")
        unit = "characters" if base is str else "items"
        text += (
            f" with {low} to {high} {unit}"
            if low is not None and high is not None
            else f" with at least {low} {unit}"
            if low is not None
            else f" with at most {high} {unit}"
        )
    return text
