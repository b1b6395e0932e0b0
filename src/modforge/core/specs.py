"""The one way a config names a part: ``{type: NAME, args: {...}}``.

A bare string is shorthand for a part without arguments (``backbone: resnet18`` ≡
``{type: resnet18, args: {}}``).  Some places allow a few keys beside ``type``/``args``
(a loss's ``weight``, a stage's ``name``/``prev``); they are the ``extras`` of that place.
Anything else next to ``type`` is an error — most often arguments written outside
``args:``, which the message points out.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .errors import ConfigValueError, UnknownKeyError

__all__ = ["ARGS_ALIASES", "normalize_spec", "SPEC_KEYS"]

SPEC_KEYS = ("type", "args")

ARGS_ALIASES = frozenset({"kwarg", "kwargs", "arguments", "params", "parameters", "options", "cfg"})
"""What other frameworks call a part's ``args:`` mapping (United Perception: ``kwarg:``)."""


def _unknown_key_message(key: str, value: Any, allowed: set[str]) -> str:
    """Say what an unexpected key beside ``type`` most likely meant: ``args`` misnamed
    (a mapping under ``kwarg:``), another allowed key mistyped, or an argument outside ``args:``."""
    valid = ", ".join(sorted(allowed))
    if key.lower() in ARGS_ALIASES and (isinstance(value, Mapping) or value is None):
        return f"unknown key '{key}'; did you mean 'args'? Rename '{key}:' to 'args:' (allowed here: {valid})"
    close = difflib.get_close_matches(key, sorted(allowed), n=1, cutoff=0.75)
    if close:
        return f"unknown key '{key}'; did you mean '{close[0]}'? (allowed here: {valid})"
    return f"unknown key '{key}' beside 'type' (allowed here: {valid}); part arguments go under 'args:', e.g. args.{key}"


def normalize_spec(
    value: Any,
    *,
    path: str,
    kind: str = "part",
    extras: Iterable[str] = (),
    origin_of: Callable[[str], str | None] | None = None,
) -> dict[str, Any]:
    """Return ``{"type": str, "args": dict, **extras}`` for any accepted spelling of a part.

    Args:
        value: a string or a mapping from the config.
        path: dotted config path of ``value`` (for messages).
        kind: the registry kind, for messages ("backbone").
        extras: keys allowed beside ``type`` and ``args`` at this place.
        origin_of: callable mapping a config path to the file/override it came from.

    Raises:
        ConfigValueError: not a string/mapping, or ``type``/``args`` of the wrong shape.
        UnknownKeyError: an unexpected key beside ``type``.
    """
    where = origin_of or (lambda _p: None)
    expected = f"a {kind} name or {{type: NAME, args: {{...}}}}"
    if isinstance(value, str):
        if not value.strip():
            raise ConfigValueError(f"expected {expected}, got an empty string", path=path, source=where(path))
        return {"type": value.strip(), "args": {}}
    if not isinstance(value, Mapping):
        raise ConfigValueError(f"expected {expected}, got {value!r}", path=path, source=where(path))
    if "type" not in value:
        raise ConfigValueError(
            f"missing 'type': expected {expected}, got keys {sorted(map(str, value))}",
            path=path,
            source=where(path),
        )
    type_name = value["type"]
    if not isinstance(type_name, str) or not type_name.strip():
        raise ConfigValueError(
            f"expected a {kind} name (a string), got {type_name!r}", path=f"{path}.type", source=where(f"{path}.type")
        )
    args = value.get("args")
    if args is None:
        args = {}
    if not isinstance(args, Mapping):
        raise ConfigValueError(
            f"expected a mapping of argument names to values, got {args!r}",
            path=f"{path}.args",
            source=where(f"{path}.args"),
        )
    allowed = set(SPEC_KEYS) | set(extras)
    spec: dict[str, Any] = {"type": type_name.strip(), "args": dict(args)}
    for key, extra in value.items():
        if key in SPEC_KEYS:
            continue
        if key not in allowed:
            raise UnknownKeyError(_unknown_key_message(str(key), extra, allowed), path=f"{path}.{key}",
                                  source=where(f"{path}.{key}"))  # fmt: skip
        spec[key] = extra
    return spec
