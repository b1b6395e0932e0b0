"""Turn config values and command-line strings into the types a part declares.

Validation is pydantic's (lax mode), so ``"64"`` becomes ``64`` for an ``int`` argument,
``"yes"``/``"0"`` become booleans, and ``"abc"`` for an ``int`` is refused.  On top of
pydantic this module adds what a config/CLI user expects and pydantic does not do:

* ``none``/``null`` (any case) mean ``None`` wherever ``None`` is allowed;
* on the command line, ``1,2,3`` (or a repeated flag) is a list, ``{a: 1}`` is a mapping;
* an ``Enum`` accepts its members' names as well as their values;
* a ``bool`` is never silently read as an ``int`` (``depth: true`` is an error).

Errors are :class:`~modforge.core.errors.ConfigValueError` with a human type name
(``int or None``, ``list of int``, ``one of 'a', 'b'``); callers add the location.
"""

from __future__ import annotations

import enum
import functools
import inspect
import typing
from typing import Any, Literal

import yaml

from .errors import ConfigValueError
from .type_names import _is_mapping_origin, _is_sequence_origin, _is_union, _non_none_members, _unwrap, describe_type

__all__ = [
    "allows_none",
    "choices_of",
    "coerce",
    "coerce_cli",
    "describe_type",
    "parse_scalar",
    "to_plain",
]

_NONE_WORDS = frozenset({"none", "null", "~"})


def parse_scalar(text: str) -> Any:
    """Read a command-line or override value as YAML would (``64`` → int, ``[1,2]`` → list).

    Text that is not valid YAML is returned unchanged as a string, so
    ``name=[unclosed`` sets the string ``'[unclosed'``; quote a value to force a
    string (``name="123"``).
    """
    from .yaml_guard import load_value

    try:
        return load_value(text, "a command-line value")  # bounded like a config file: no alias bombs
    except yaml.YAMLError:
        return text


def allows_none(tp: Any) -> bool:
    """True when ``None`` is a valid value for annotation ``tp``."""
    tp = _unwrap(tp)
    if tp is Any or tp is None or tp is type(None):
        return True
    if _is_union(tp):
        return any(arg is type(None) or allows_none(arg) for arg in typing.get_args(tp))
    if typing.get_origin(tp) is Literal:
        return None in typing.get_args(tp)
    return False


def _strip_optional(tp: Any) -> Any:
    """``Optional[X]`` → ``X`` and ``Annotated[X, ...]`` → ``X``; any other annotation unchanged."""
    tp = _unwrap(tp)
    if _is_union(tp):
        members = _non_none_members(tp)
        if len(members) == 1:
            return _unwrap(members[0])
    return tp


def choices_of(tp: Any) -> tuple[Any, ...] | None:
    """The finite set of allowed values of a ``Literal`` or ``Enum`` annotation, else None."""
    tp = _strip_optional(tp)
    if typing.get_origin(tp) is Literal:
        return tuple(typing.get_args(tp))
    if inspect.isclass(tp) and issubclass(tp, enum.Enum):
        return tuple(member.value for member in tp)
    return None


def _is_collection(tp: Any) -> bool:
    tp = _strip_optional(tp)
    origin = typing.get_origin(tp) or (tp if inspect.isclass(tp) else None)
    return origin in (list, tuple, set, frozenset) or _is_sequence_origin(origin)


def _is_mapping(tp: Any) -> bool:
    tp = _strip_optional(tp)
    origin = typing.get_origin(tp) or (tp if inspect.isclass(tp) else None)
    return origin is dict or _is_mapping_origin(origin)


def _admits_bool(tp: Any) -> bool:
    tp = _strip_optional(tp)
    if tp is bool or tp is Any:
        return True
    if _is_union(tp):
        return any(_admits_bool(m) for m in typing.get_args(_unwrap(tp)))
    if typing.get_origin(tp) is Literal:
        return any(isinstance(a, bool) for a in typing.get_args(tp))
    return False


def _is_numeric(tp: Any) -> bool:
    tp = _strip_optional(tp)
    if tp in (int, float, complex):
        return True
    if _is_union(tp):
        return any(_is_numeric(m) for m in _non_none_members(tp))
    return False


def _new_adapter(tp: Any) -> Any:
    """A pydantic TypeAdapter for ``tp``, or None when pydantic cannot validate the type.

    pydantic is imported here, on first validation, so commands that only list parts
    do not pay for it.
    """
    from pydantic import ConfigDict, TypeAdapter

    try:
        return TypeAdapter(tp, config=ConfigDict(arbitrary_types_allowed=True, coerce_numbers_to_str=True))
    except Exception:  # pydantic refuses some annotations (callables with odd signatures, ...)
        return None


_adapter = functools.lru_cache(maxsize=512)(_new_adapter)


def _adapter_for(tp: Any) -> Any:
    try:
        return _adapter(tp)
    except TypeError:  # unhashable annotation object
        return _new_adapter(tp)


def _enum_by_name(tp: Any, value: Any) -> Any:
    target = _strip_optional(tp)
    if isinstance(value, str) and inspect.isclass(target) and issubclass(target, enum.Enum):
        if value in target.__members__:
            return target.__members__[value]
    return value


def coerce(value: Any, tp: Any) -> Any:
    """Validate ``value`` (from YAML or Python) against annotation ``tp`` and convert it.

    Raises:
        ConfigValueError: the value does not fit; the message names the expected type
            and the value given. The caller adds the location with ``located()``.
    """
    if tp is Any or tp is inspect.Parameter.empty:
        return value
    if isinstance(value, str) and value.strip().lower() in _NONE_WORDS and allows_none(tp):
        return None
    if isinstance(value, bool) and _is_numeric(tp) and not _admits_bool(tp):
        raise ConfigValueError(f"expected {describe_type(tp)}, got {value!r}")
    value = _enum_by_name(tp, value)
    adapter = _adapter_for(tp)
    if adapter is None:
        return value
    from pydantic import ValidationError

    try:
        return adapter.validate_python(value)
    except ValidationError as exc:
        detail = _first_detail(exc, value)
        raise ConfigValueError(f"expected {describe_type(tp)}, got {value!r}{detail}") from None


def _first_detail(exc: Any, value: Any) -> str:
    """For nested values say which element failed (``at [2]``); for scalars nothing."""
    errors = exc.errors()
    if not errors:
        return ""
    loc = errors[0].get("loc", ())
    if not loc or not isinstance(value, (list, tuple, dict, set)):
        return ""
    bad = errors[0].get("input")
    where = "".join(f"[{part!r}]" if isinstance(part, str) else f"[{part}]" for part in loc)
    return f" (element {where} = {bad!r})"


def _split_items(value: Any) -> list[Any]:
    """CLI list syntax: ``1,2,3``; a repeated flag gives several such strings."""
    pieces = value if isinstance(value, list) else [value]
    items: list[Any] = []
    for piece in pieces:
        if not isinstance(piece, str):
            items.append(piece)
            continue
        text = piece.strip()
        if text.startswith("[") and text.endswith("]"):
            parsed = parse_scalar(text)
            items.extend(parsed if isinstance(parsed, list) else [text])
            continue
        items.extend(part.strip() for part in text.split(",") if part.strip() != "")
    return items


def coerce_cli(value: Any, tp: Any) -> Any:
    """Like :func:`coerce`, for text typed on the command line.

    ``value`` is a string, or a list of strings when the flag was repeated.
    """
    if isinstance(value, str) and value.strip().lower() in _NONE_WORDS and allows_none(tp):
        return None
    if _is_collection(tp):
        return coerce(_split_items(value), tp)
    if isinstance(value, list):
        value = value[-1]  # a repeated scalar flag: the last one wins, as in argparse
    if _is_mapping(tp) or tp is Any or tp is inspect.Parameter.empty:
        return coerce(parse_scalar(value), tp)
    if _is_union(tp) and not choices_of(tp):
        parsed = parse_scalar(value)
        try:
            return coerce(parsed, tp)
        except ConfigValueError:
            return coerce(value, tp)
    return coerce(value, tp)


def to_plain(value: Any, tp: Any = Any) -> Any:
    """The YAML-friendly form of a coerced value (enums → values, tuples → lists)."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: to_plain(v) for k, v in value.items()}
    return value
