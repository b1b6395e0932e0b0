"""Range checks from a signature's ``Annotated`` constraints, wherever the value is set.

A setting or a part argument annotated with a constrained type
(:mod:`modforge.core.constraints`: ``PositiveInt``, ``NonNegativeFloat``...) must be refused
when the config is validated, naming the key — not misbehave at step 3. The signature
reader validates each value against its annotation; :func:`check_ranges` checks the same
values against the annotations *with* their constraints (``typing.get_type_hints(...,
include_extras=True)``), so a range is enforced even where an annotation reader drops
``Annotated`` metadata. Values that pass are returned unchanged.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Mapping
from typing import Annotated, Any

from ..core.coercion import allows_none, coerce
from ..core.errors import ConfigError

__all__ = ["check_ranges", "constrained_hints"]


def constrained_hints(obj: Any) -> dict[str, Any]:
    """The parameters of ``obj`` (a class's ``__init__`` or a function) whose annotation
    carries constraints, with that annotation (``{}`` when none can be read)."""
    func = obj.__init__ if inspect.isclass(obj) else obj
    try:
        hints = typing.get_type_hints(func, include_extras=True)
    except Exception:  # noqa: BLE001 - unresolvable forward references: nothing to check
        return {}
    return {name: tp for name, tp in hints.items() if _constrained(tp)}


def _constrained(tp: Any) -> bool:
    if typing.get_origin(tp) is Annotated:
        return True
    return any(_constrained(arg) for arg in typing.get_args(tp))


def check_ranges(
    obj: Any,
    values: Mapping[str, Any],
    *,
    path: str,
    origin_of: Callable[[str], str | None] | None = None,
) -> None:
    """Refuse any value in ``values`` outside its parameter's constrained range.

    Args:
        obj: the class or function whose signature ``values`` are for.
        values: argument name → value (already type-checked).
        path: the config path of ``values`` (``train``, ``train.optimizer.args``).
        origin_of: ``path → source`` for the message (file:line, flag or override).

    Raises:
        ConfigValueError: naming ``path.name``, what was expected and the value.
    """
    where = origin_of or (lambda _p: None)
    for name, tp in constrained_hints(obj).items():
        if name not in values:
            continue
        value = values[name]
        if value is None and allows_none(tp):
            continue
        try:
            coerce(value, tp)
        except ConfigError as exc:
            key = f"{path}.{name}"
            raise exc.located(path=key, source=where(key)) from None


def constrained_class(cls: type, ranges: Mapping[str, Any]) -> type:
    """A subclass of ``cls`` whose ``__init__`` declares the constrained types in ``ranges``
    (parameter name → annotation) for the parameters it has, and otherwise behaves exactly
    as ``cls`` (same name, module, docstring and defaults). Used for classes modforge does
    not own — torch's optimizers and schedulers — so their signatures carry the ranges.
    ``cls`` itself is returned when none of ``ranges`` applies."""
    original = cls.__init__
    signature = inspect.signature(original)
    applied = {name: tp for name, tp in ranges.items()
               if name in signature.parameters and _fits(signature.parameters[name].default, tp)}  # fmt: skip
    if not applied:
        return cls
    try:
        hints = typing.get_type_hints(original, include_extras=True)
    except Exception:  # noqa: BLE001 - unresolvable forward references: keep the raw annotations
        hints = dict(getattr(original, "__annotations__", {}) or {})
    hints.update(applied)
    params = [p.replace(annotation=applied.get(p.name, p.annotation)) for p in signature.parameters.values()]

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # noqa: N807 - the constructor of the subclass
        original(self, *args, **kwargs)

    __init__.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    __init__.__annotations__ = hints
    __init__.__doc__ = original.__doc__
    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    namespace = {"__init__": __init__, "__doc__": cls.__doc__, "__module__": cls.__module__,
                 "__qualname__": cls.__qualname__}  # fmt: skip
    return type(cls.__name__, (cls,), namespace)


def _fits(default: Any, tp: Any) -> bool:
    """Whether range ``tp`` is for values like ``default`` (a tuple range for a tuple default,
    a number range for a number): ``eps`` is a number in Adam, a pair in Adafactor."""
    if default is inspect.Parameter.empty:
        return True
    if typing.get_origin(tp) is tuple:
        return isinstance(default, tuple)
    return isinstance(default, (int, float)) and not isinstance(default, bool)
