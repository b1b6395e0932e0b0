"""Human names for annotations (:func:`describe_type`: ``int or None``, ``list of int``), constrained ones
(``Annotated[float, Field(ge=0, le=1)]``) included, and the annotation-shape tests they share with
:mod:`.coercion` (a union, its members, a sequence or mapping origin).

pydantic checks the constraints; this module only says them in words, so an error reads
``expected a number in [0, 1], got -0.5`` instead of printing the annotation's repr, and a
``--help`` line or ``modforge describe`` row says what a value may be. It understands the
``annotated_types`` bounds (``Gt``, ``Ge``, ``Lt``, ``Le``, ``Interval``), ``MinLen``/``MaxLen``,
pydantic's ``allow_inf_nan`` and ``Field(...)`` carrying any of them — which covers
:mod:`modforge.core.constraints` and a user's own ``Annotated[float, Field(gt=0)]``.
"""

from __future__ import annotations

import enum
import inspect
import types
import typing
from typing import Annotated, Any, Literal, Union

__all__ = ["constraints_of", "describe_constrained", "describe_type"]

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


# ------------------------------------------------------------------ annotation shapes
def _unwrap(tp: Any) -> Any:
    """``Annotated[X, ...]`` → ``X`` (the constraints are pydantic's to check); else ``tp``."""
    while typing.get_origin(tp) is Annotated:
        tp = typing.get_args(tp)[0]
    return tp


def _is_union(tp: Any) -> bool:
    return typing.get_origin(_unwrap(tp)) in (Union, types.UnionType)


def _non_none_members(tp: Any) -> list[Any]:
    return [arg for arg in typing.get_args(_unwrap(tp)) if arg is not type(None)]


def _is_sequence_origin(origin: Any) -> bool:
    import collections.abc as cabc

    return origin in (cabc.Sequence, cabc.MutableSequence, cabc.Iterable, cabc.Collection)


def _is_mapping_origin(origin: Any) -> bool:
    import collections.abc as cabc

    return origin in (cabc.Mapping, cabc.MutableMapping)


# ------------------------------------------------------------------ any annotation
def describe_type(tp: Any) -> str:
    """A short English name for an annotation, as used in error messages and tables."""
    if tp is Any or tp is inspect.Parameter.empty:
        return "any"
    if tp is type(None) or tp is None:
        return "None"
    if typing.get_origin(tp) is Annotated:
        return describe_constrained(tp)
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if _is_union(tp):
        members = _non_none_members(tp)
        text = " or ".join(describe_type(m) for m in members)
        return f"{text} or None" if len(members) < len(args) else text
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if inspect.isclass(tp) and issubclass(tp, enum.Enum):
        return "one of " + ", ".join(repr(m.value) for m in tp)
    if origin in (list, set, frozenset) or (origin is not None and _is_sequence_origin(origin)):
        name = {set: "set", frozenset: "set"}.get(origin, "list")
        return f"{name} of {_element_name(args[0])}" if args else name
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return f"tuple of {_element_name(args[0])}"
        if args:
            return "tuple (" + ", ".join(describe_type(a) for a in args) + ")"
        return "tuple"
    if origin is dict or (origin is not None and _is_mapping_origin(origin)):
        if args:
            return f"mapping of {describe_type(args[0])} to {describe_type(args[1])}"
        return "mapping"
    if inspect.isclass(tp):
        return {dict: "mapping"}.get(tp, tp.__name__)
    return str(tp).replace("typing.", "")


def _element_name(tp: Any) -> str:
    """An element type inside ``list of …``: a constrained one in the plural."""
    return describe_constrained(tp, plural=True) if typing.get_origin(tp) is Annotated else describe_type(tp)
