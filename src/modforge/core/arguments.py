"""A part's arguments, read from its signature and docstring.

For each parameter of a registered class's ``__init__`` (or of a registered function)
an :class:`ArgSpec` records the name, the type (the annotation; else the type of the
default; else ``str``), the default, whether it is required, its help text (from the
docstring's Args/Parameters section, Google, NumPy or reST style) and its choices
(from ``Literal`` or ``Enum``).  The same specs drive config validation
(:meth:`PartSignature.validate`) and the command-line flags the CLI adds for the part.

Parameters the builder fills in itself (``in_dim``, ``num_classes``, an optimizer's
``params``...) are marked *injected* and never required from the user.  A ``**kwargs``
parameter is reported as such: keys it would accept are passed through unvalidated.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import typing
from collections.abc import Iterable, Mapping
from typing import Any, Optional

from .coercion import choices_of, coerce, describe_type, to_plain
from .errors import ConfigError, ConfigValueError, MissingArgumentError, UnknownKeyError
from .porting_hints import CLASS_COUNT_NAMES, INPUT_SIZE_NAMES, missing_hint, unannotated_hint

__all__ = ["ArgSpec", "INJECTED_ALIASES", "PartSignature", "REQUIRED", "signature_of", "summary_of"]

REQUIRED = inspect.Parameter.empty
"""Sentinel default of a parameter that has none."""


INJECTED_ALIASES: dict[str, str] = {
    **dict.fromkeys((*INPUT_SIZE_NAMES, "in_dim"), "in_dim"),
    **dict.fromkeys((*CLASS_COUNT_NAMES, "num_classes"), "num_classes"),
}
"""Names other frameworks use for what modforge's builder injects (DeepFense's
``input_dim``, UP's ``inplanes``...), so a ported config gets a precise message."""


@dataclasses.dataclass(frozen=True)
class ArgSpec:
    """One argument of a registered part.

    Attributes:
        name: the parameter name, as written in ``args:`` in a config.
        type: the annotation used for validation (``typing.Any`` when unknown).
        default: the default value, or :data:`REQUIRED`.
        help: one paragraph from the docstring, or ``""``.
        injected: filled in by the builder (``in_dim`` ...), not by the user.
        inferred: True when ``type`` was inferred from the default, not annotated.
    """

    name: str
    type: Any
    default: Any = REQUIRED
    help: str = ""
    injected: bool = False
    inferred: bool = False

    @property
    def required(self) -> bool:
        """True when the user must give a value (no default and not injected)."""
        return self.default is REQUIRED and not self.injected

    @property
    def has_default(self) -> bool:
        return self.default is not REQUIRED

    @property
    def choices(self) -> tuple[Any, ...] | None:
        return choices_of(self.type)

    @property
    def type_name(self) -> str:
        return describe_type(self.type)

    @property
    def flag(self) -> str:
        """The command-line spelling: ``hidden_dims`` → ``--hidden-dims``."""
        return "--" + self.name.replace("_", "-")

    def coerce(self, value: Any) -> Any:
        """Validate and convert one value for this argument (location added by the caller).

        When the type was not annotated but inferred, the error says so: ``config: expected
        str, got {…} (it has no type annotation, so it is read as str)``.
        """
        try:
            return coerce(value, self.type)
        except ConfigValueError as exc:
            hint = unannotated_hint(self.inferred, self.default, REQUIRED)
            if not hint:
                raise
            raise ConfigValueError(exc.message + hint, path=exc.path, source=exc.source) from None


def _infer_type(param: inspect.Parameter, hint: Any) -> tuple[Any, bool]:
    """The validation type of one parameter, and whether it was inferred from the default."""
    default = param.default
    if hint is not inspect.Parameter.empty:
        if default is None and hint is not Any and not _admits_none(hint):
            return Optional[hint], False  # `x: int = None` means Optional[int]
        return hint, False
    if default is REQUIRED:
        return str, True  # Mammoth's rule: no annotation, no default → str
    if default is None:
        return Any, True  # a None default accepts any value (Mammoth refuses them)
    if isinstance(default, (list, tuple)) and default:
        kinds = {type(v) for v in default}
        if len(kinds) == 1:
            elem = kinds.pop()
            return (list[elem] if isinstance(default, list) else tuple[elem, ...]), True
        return type(default), True
    return type(default), True


def _admits_none(tp: Any) -> bool:
    from .coercion import allows_none

    return allows_none(tp)


def _type_hints(func: Any) -> dict[str, Any]:
    """Annotations with string forward references resolved where possible."""
    try:
        return typing.get_type_hints(func, include_extras=True)  # keep Annotated constraints (Probability...)
    except Exception:
        raw = dict(getattr(func, "__annotations__", {}) or {})
        return {k: (Any if isinstance(v, str) else v) for k, v in raw.items()}


def summary_of(obj: Any) -> str:
    """The first paragraph of ``obj``'s docstring, on one line (``""`` without one)."""
    doc = inspect.getdoc(obj) or ""
    return " ".join(doc.strip().split("\n\n", 1)[0].split())


def _docstring_params(*objects: Any) -> tuple[str, str, dict[str, str]]:
    """(summary, full docstring, {param: help}) merged from several docstrings."""
    import docstring_parser

    summary, full, helps = "", "", {}
    for obj in objects:
        doc = inspect.getdoc(obj) if obj is not None else None
        if not doc:
            continue
        if not full:
            full = doc
        if not summary:
            summary = summary_of(obj)
        try:
            parsed = docstring_parser.parse(doc)
        except Exception:  # a docstring that is not in any known style: keep the prose only
            parsed = None
        if parsed is None:
            continue
        for p in parsed.params:
            if p.arg_name and p.description and p.arg_name not in helps:
                helps[p.arg_name.lstrip("*")] = " ".join(p.description.split())
    return summary, full, helps


@dataclasses.dataclass(frozen=True)
class PartSignature:
    """Every argument of one part, plus what its signature accepts beyond them."""

    args: tuple[ArgSpec, ...]
    var_keyword: str | None = None
    var_positional: str | None = None
    summary: str = ""
    doc: str = ""
    wired: tuple[str, ...] = ()
    """What the builder fills in for parts of this kind (``in_dim``...), whether or not this
    signature names it: a missing ``input_dim`` is then reported as a misnamed ``in_dim``."""

    def __iter__(self):
        return iter(self.args)

    def __contains__(self, name: str) -> bool:
        return any(a.name == name for a in self.args)

    def get(self, name: str) -> ArgSpec | None:
        for a in self.args:
            if a.name == name:
                return a
        return None

    @property
    def names(self) -> list[str]:
        return [a.name for a in self.args]

    @property
    def user_args(self) -> list[ArgSpec]:
        """The arguments a user sets (everything but the injected ones)."""
        return [a for a in self.args if not a.injected]

    def accepts(self, name: str) -> bool:
        """True when ``name`` may be passed as a keyword argument."""
        return name in self or self.var_keyword is not None

    def validate(
        self,
        values: Mapping[str, Any],
        *,
        path: str = "args",
        origin_of: Any = None,
        provided: Iterable[str] = (),
        plain: bool = False,
    ) -> dict[str, Any]:
        """Check ``values`` against the signature; return the coerced values.

        Args:
            values: the ``args:`` mapping from a config.
            path: dotted path of that mapping, used in error messages.
            origin_of: optional callable ``path -> source`` naming the file/override a
                key came from.
            provided: names the builder will inject, so not required from ``values``.
            plain: return YAML-friendly values (enum members → values, tuples → lists)
                for storing in a resolved config, instead of the constructor-ready ones.

        Raises:
            UnknownKeyError: a key that is not a parameter (with the closest name).
            ConfigValueError: a value of the wrong type.
            MissingArgumentError: a required argument is absent.
        """
        where = origin_of or (lambda _p: None)
        if not isinstance(values, Mapping):
            raise _value_error(f"expected a mapping of argument names to values, got {values!r}", path, where)
        out: dict[str, Any] = {}
        for key, value in values.items():
            key_path = f"{path}.{key}"
            spec = self.get(str(key))
            if spec is None:
                if self.var_keyword is not None:
                    out[key] = value  # reported as **kwargs: passed through, not guessed
                    continue
                raise UnknownKeyError(self._unknown_message(str(key)), path=key_path, source=where(key_path))
            try:
                coerced = spec.coerce(value)
                out[key] = to_plain(coerced) if plain else coerced
            except ConfigError as exc:
                raise exc.located(path=key_path, source=where(key_path)) from None
        provided = set(provided)
        for spec in self.args:
            if spec.required and spec.name not in out and spec.name not in provided:
                raise MissingArgumentError(
                    f"required argument missing (expected {spec.type_name}){self.missing_hint(spec)}",
                    path=f"{path}.{spec.name}",
                    source=where(path),
                )
        return out

    def missing_hint(self, spec: ArgSpec) -> str:
        """Why ``spec`` may be missing (a misnamed ``in_dim``, an un-annotated argument), or ``""``."""
        wired_as = INJECTED_ALIASES.get(spec.name.lower())
        if wired_as is not None and wired_as not in self:  # the part has no in_dim of its own: this is it, misnamed
            hint = missing_hint(spec.name, self.wired)
            if hint:
                return hint
        return "; it has no type annotation, so it is read as str" if spec.inferred else ""

    def _unknown_message(self, key: str) -> str:
        wired = INJECTED_ALIASES.get(key.lower())
        if wired is not None and (arg := self.get(wired)) is not None and arg.injected:
            return (
                f"unknown argument '{key}': this part's '{wired}' is wired by the builder "
                "from the previous part (or the data); remove it from the config"
            )
        names = [a.name for a in self.user_args]
        close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        valid = ", ".join(names) if names else "none"
        return f"unknown argument '{key}'{hint} (valid arguments: {valid})"


def _value_error(message: str, path: str, where: Any) -> ConfigError:
    from .errors import ConfigValueError

    return ConfigValueError(message, path=path, source=where(path))


def signature_of(obj: Any, injected: Iterable[str] = ()) -> PartSignature:
    """Read the arguments of a class (its ``__init__``) or a function.

    Args:
        obj: the registered class or function.
        injected: parameter names the builder fills in (never required from the user).
    """
    injected = set(injected)
    is_class = inspect.isclass(obj)
    init = obj.__init__ if is_class else obj
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return PartSignature(
            args=(), var_keyword="kwargs", summary="", doc=inspect.getdoc(obj) or "", wired=tuple(injected)
        )
    hints = _type_hints(init)
    summary, doc, helps = _docstring_params(obj, init if is_class else None)
    args: list[ArgSpec] = []
    var_kw = var_pos = None
    for param in sig.parameters.values():
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            var_kw = param.name
            continue
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            var_pos = param.name
            continue
        tp, inferred = _infer_type(param, hints.get(param.name, inspect.Parameter.empty))
        args.append(
            ArgSpec(
                name=param.name,
                type=tp,
                default=param.default,
                help=helps.get(param.name, ""),
                injected=param.name in injected,
                inferred=inferred,
            )
        )
    return PartSignature(tuple(args), var_kw, var_pos, summary, doc, tuple(sorted(injected)))
