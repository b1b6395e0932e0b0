"""The registry: named, swappable parts of one kind.

One :class:`Registry` class, one instance per kind (backbone, head, loss, ...).  A
registry maps exact names to classes or functions, remembers where each came from,
reads their arguments from their signatures, and builds them from config specs::

    BACKBONES = Registry("backbone", injected=("in_dim", "num_classes"))

    @BACKBONES.register("resnet")
    def resnet(depth: int, width: int = 1): ...

    BACKBONES.build({"type": "resnet", "args": {"depth": 18}}, in_dim=3)

Lookups are exact (``resnet_18``, ``resnet-18`` and ``ResNet18`` are three names);
suggestions for unknown names are fuzzy.  Built-in parts live in *provider* modules
that are imported the first time the registry's contents are asked for, together with
the ``modforge.plugins`` entry points, so importing modforge stays cheap.
"""

from __future__ import annotations

import dataclasses
import difflib
import fnmatch
import importlib
import inspect
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from .arguments import PartSignature, signature_of, summary_of
from .cwd import display_path
from .errors import (
    BuildError,
    ConfigError,
    DuplicateComponentError,
    MissingArgumentError,
    RegistrationError,
    UnknownComponentError,
    UsageError,
)
from .part_layouts import normalize_layouts
from .plugins import PLUGIN_MODULE_PREFIX, import_object, is_import_path, load_entry_point_plugins
from .specs import normalize_spec

__all__ = ["Entry", "Registry"]

T = TypeVar("T")
_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")


def _file_of(obj: Any) -> str:
    try:
        return inspect.getsourcefile(obj) or inspect.getfile(obj)
    except (TypeError, OSError):
        return "?"


def _line_of(obj: Any) -> int | None:
    """First line of ``obj``'s definition; cheap for functions, a source scan for classes."""
    code = getattr(obj, "__code__", None)
    if code is not None:
        return code.co_firstlineno
    try:
        return inspect.getsourcelines(obj)[1]
    except (TypeError, OSError):  # e.g. a class made by a factory function: its own __init__'s line
        init = obj.__dict__.get("__init__") if inspect.isclass(obj) else None
        return init.__code__.co_firstlineno if init is not None and hasattr(init, "__code__") else None


@dataclasses.dataclass
class Entry:
    """One registered part and where it was defined."""

    name: str
    kind: str
    obj: Any
    module: str
    injected: tuple[str, ...] = ()
    _signature: PartSignature | None = dataclasses.field(default=None, repr=False)
    _file: str | None = dataclasses.field(default=None, repr=False)
    _line: int | None | bool = dataclasses.field(default=False, repr=False)

    @property
    def file(self) -> str:
        """Source file of the definition (``"?"`` when unknown); looked up on first use."""
        if self._file is None:
            self._file = _file_of(self.obj)
        return self._file

    @property
    def line(self) -> int | None:
        """First line of the definition; looked up on first use (reading a class's
        source is slow, and ``modforge list`` never needs it)."""
        if self._line is False:
            self._line = _line_of(self.obj)
        return self._line  # type: ignore[return-value]

    @property
    def qualname(self) -> str:
        return f"{self.module}.{getattr(self.obj, '__qualname__', self.name)}"

    @property
    def origin(self) -> str:
        """Where the part comes from, for tables: its module, or the file of a ``.py`` plug-in."""
        if self.module.startswith(PLUGIN_MODULE_PREFIX) and self.file != "?":
            return display_path(self.file)
        return self.module

    @property
    def location(self) -> str:
        """``module (file:line)`` for messages and ``describe``."""
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{self.module} ({where})"

    @property
    def is_class(self) -> bool:
        return inspect.isclass(self.obj)

    @property
    def signature(self) -> PartSignature:
        """The part's arguments (computed once)."""
        if self._signature is None:
            self._signature = signature_of(self.obj, self.injected)
        return self._signature

    @property
    def summary(self) -> str:
        """The docstring's first paragraph (without reading the whole signature)."""
        return summary_of(self.obj)


def _normalized(name: str) -> str:
    return re.sub(r"[\s_\-.]", "", name).lower()


class Registry:
    """Named parts of one kind.

    Args:
        kind: what the registry holds, singular ("backbone"); used in messages.
        injected: parameter names the builder fills in for parts of this kind
            (``in_dim``, ``num_classes``, an optimizer's ``params``); never required
            from the user and never offered as command-line flags.
        providers: modules that define the built-in parts, imported on first use.
        base: ``module:Class`` every class of this kind derives from (``torch.nn:Module`` for
            model parts); a ``type:`` import path naming any other class is refused unbuilt.
    """

    def __init__(
        self, kind: str, *, injected: Iterable[str] = (), providers: Iterable[str] = (), base: str | None = None
    ):
        self.kind = kind
        self.base = base
        self.injected = tuple(injected)
        self._providers = list(providers)
        self._entries: dict[str, Entry] = {}
        self._loaded = False
        self._lock = threading.RLock()

    # ----------------------------------------------------------------- loading
    def add_provider(self, module: str) -> None:
        """Name another module whose import registers built-in parts of this kind."""
        with self._lock:
            if module not in self._providers:
                self._providers.append(module)
                self._loaded = False

    def _ensure_loaded(self) -> None:
        if self._loaded:
            return
        with self._lock:
            if self._loaded:
                return
            self._loaded = True  # set first: providers may query the registry while importing
            try:
                for module in self._providers:
                    importlib.import_module(module)
                load_entry_point_plugins()
            except BaseException:
                self._loaded = False
                raise

    # ------------------------------------------------------------ registration
    def register(self, name: str | Callable | None = None, *, force: bool = False) -> Callable[[T], T]:
        """Decorator registering a class or a function under ``name``.

        ``@reg.register("mine")``, ``@reg.register()`` (the object's own name) and bare
        ``@reg.register`` all work.  The decorated object is returned unchanged.

        Raises:
            DuplicateComponentError: ``name`` is taken by another definition and
                ``force`` is False. Re-registering the *same* definition (a module
                imported twice) replaces the entry silently.
        """
        if callable(name) and not isinstance(name, str):
            obj = name
            self.add(obj, None, force=force)
            return obj  # type: ignore[return-value]

        def decorator(obj: T) -> T:
            self.add(obj, name, force=force)
            return obj

        return decorator

    def add(self, obj: Any, name: str | None = None, *, force: bool = False) -> Entry:
        """Register ``obj`` (class or function) under ``name`` (default: its ``__name__``)."""
        if not callable(obj):
            raise RegistrationError(f"only classes and functions can be registered as a {self.kind}, got {obj!r}")
        name = name if name is not None else getattr(obj, "__name__", None)
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise RegistrationError(
                f"invalid {self.kind} name {name!r}: use letters, digits, '_', '-' and '.' "
                "(no spaces or ':'), starting with a letter, digit or '_'"
            )
        normalize_layouts(obj, f"{self.kind} '{name}'")  # accepts = ("vector",) → (Layout.VECTOR,)
        module = getattr(obj, "__module__", None) or "?"
        entry = Entry(name, self.kind, obj, module, self.injected)
        with self._lock:
            old = self._entries.get(name)
            if old is not None and not force and not self._same_definition(old, entry):
                raise DuplicateComponentError(
                    f"{self.kind} '{name}' is already registered by {old.location}; "
                    f"the new definition is in {entry.location}. Choose another name, or pass "
                    f"force=True to replace it."
                )
            self._entries[name] = entry
        return entry

    @staticmethod
    def _same_definition(old: Entry, new: Entry) -> bool:
        return old.module == new.module and (
            getattr(old.obj, "__qualname__", None) == getattr(new.obj, "__qualname__", None)
        )

    def remove(self, name: str) -> Any:
        """Unregister ``name`` and return its object (for tests and plug-in reloads)."""
        with self._lock:
            if name not in self._entries:
                raise self._unknown(name)
            return self._entries.pop(name).obj

    # ------------------------------------------------------------------ lookup
    def __contains__(self, name: object) -> bool:
        self._ensure_loaded()
        return name in self._entries

    def __len__(self) -> int:
        self._ensure_loaded()
        return len(self._entries)

    def __iter__(self) -> Iterator[str]:
        self._ensure_loaded()
        return iter(sorted(self._entries))

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {len(self._entries)} entries)"

    def list(self, pattern: str | None = None) -> list[str]:
        """Sorted names, optionally filtered by a shell wildcard (``res*``, ``*net?``)."""
        self._ensure_loaded()
        names = sorted(self._entries)
        if pattern:
            names = [n for n in names if fnmatch.fnmatchcase(n, pattern)]
        return names

    def entries(self, pattern: str | None = None) -> list[Entry]:
        """Entries for :meth:`list`'s names, in the same order."""
        return [self._entries[n] for n in self.list(pattern)]

    def entry(self, name: str) -> Entry:
        """The :class:`Entry` of ``name``.

        Raises:
            UnknownComponentError: with close matches and how to list everything.
        """
        self._ensure_loaded()
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            raise self._unknown(name) from None

    def get(self, name: str) -> Any:
        """The registered class or function called ``name`` (exact match)."""
        return self.entry(name).obj

    def suggestions(self, name: str, n: int = 3) -> list[str]:
        """Registered names close to ``name``, best first.

        A name equal to ``name`` up to case and ``_``/``-``/``.`` is the only suggestion;
        otherwise the fuzzy matches scoring within 0.1 of the best one (at least 0.6).
        """
        self._ensure_loaded()
        if not isinstance(name, str):
            return []
        target = _normalized(name)
        exact = [known for known in self._entries if _normalized(known) == target]
        if exact:
            return sorted(exact)[:n]
        scored = sorted(
            ((difflib.SequenceMatcher(None, target, _normalized(known)).ratio(), known) for known in self._entries),
            key=lambda pair: (-pair[0], pair[1]),
        )
        if not scored or scored[0][0] < 0.6:
            return []
        best = scored[0][0]
        return [known for score, known in scored if score >= max(0.6, best - 0.1)][:n]

    def _unknown(self, name: Any, *, path: str | None = None, source: str | None = None) -> UnknownComponentError:
        close = self.suggestions(name) if isinstance(name, str) else []
        if len(close) == 1:
            hint = f"; did you mean '{close[0]}'?"
        elif close:
            hint = "; did you mean one of " + ", ".join(f"'{c}'" for c in close) + "?"
        else:
            hint = ""
        return UnknownComponentError(
            f"no {self.kind} named {name!r}{hint} (run 'modforge list {self.kind}' to see all {len(self._entries)})",
            path=path,
            source=source,
        )

    # --------------------------------------------------------------- building
    def resolve(
        self,
        name: str,
        *,
        allowed_modules: Iterable[str] = (),
        base_dir: str | None = None,
        path: str | None = None,
        source: str | None = None,
    ) -> tuple[Any, PartSignature]:
        """The object and signature for a ``type:`` value: a registered name, or an
        import path inside a listed plug-in module."""
        self._ensure_loaded()
        if name in self._entries:
            entry = self._entries[name]
            return entry.obj, entry.signature
        if isinstance(name, str) and is_import_path(name):
            obj = import_object(name, kind=self.kind, allowed_modules=allowed_modules, base_dir=base_dir, path=path,
                                source=source, base=self.base)  # fmt: skip
            return obj, signature_of(obj, self.injected)
        raise self._unknown(name, path=path, source=source)

    def validate(
        self,
        spec: Any,
        *,
        path: str | None = None,
        extras: Iterable[str] = (),
        origin_of: Callable[[str], str | None] | None = None,
        allowed_modules: Iterable[str] = (),
        base_dir: str | None = None,
        provided: Iterable[str] = (),
    ) -> dict[str, Any]:
        """Check a part spec against this registry; return it normalized and coerced.

        The result is ``{"type": name, "args": {...}, **extras}`` with every argument
        converted to its declared type (in plain YAML-friendly form).

        Raises:
            ConfigError: any problem, located at ``path`` and the file it came from.
        """
        spec, _obj, sig = self._checked(spec, path, extras, origin_of, allowed_modules, base_dir)
        args_path = f"{path}.args" if path else "args"
        spec["args"] = sig.validate(spec["args"], path=args_path, origin_of=origin_of, provided=provided, plain=True)
        return spec

    def _checked(self, spec, path, extras, origin_of, allowed_modules, base_dir):
        where = origin_of or (lambda _p: None)
        label = path or self.kind
        spec = normalize_spec(spec, path=label, kind=self.kind, extras=extras, origin_of=origin_of)
        type_path = f"{label}.type"
        obj, sig = self.resolve(
            spec["type"], allowed_modules=allowed_modules, base_dir=base_dir, path=type_path, source=where(type_path)
        )
        return spec, obj, sig

    def build(
        self,
        spec: Any,
        *,
        path: str | None = None,
        extras: Iterable[str] = (),
        origin_of: Callable[[str], str | None] | None = None,
        allowed_modules: Iterable[str] = (),
        base_dir: str | None = None,
        **context: Any,
    ) -> Any:
        """Build a part from a spec (name string or ``{type, args}`` mapping).

        ``context`` holds what the builder knows (``in_dim=``, ``num_classes=``, ...);
        each item is passed only to parts whose signature names it, and ``None`` means
        "not known" (the part's default or the config's value applies). A user-given
        argument that the context also supplies must agree with it.

        Raises:
            ConfigError: unknown name, bad argument, or the constructor raised
                (:class:`BuildError`, naming the part and the cause).
        """
        label = path or self.kind
        where = origin_of or (lambda _p: None)
        spec, obj, sig = self._checked(spec, path, extras, origin_of, allowed_modules, base_dir)
        passed = {k: v for k, v in context.items() if k in sig and v is not None}  # None: not known here
        args = sig.validate(spec["args"], path=f"{label}.args", origin_of=origin_of, provided=passed)
        for arg in sig.args:
            if arg.injected and not arg.has_default and arg.name not in passed and arg.name not in args:
                raise MissingArgumentError(
                    f"required argument missing (expected {arg.type_name}); it is normally wired by the "
                    f"builder (e.g. from the previous part); when building this {self.kind} on its own, give it",
                    path=f"{label}.args.{arg.name}",
                    source=where(f"{label}.args"),
                )
        for key, value in passed.items():
            if key in args and not _equal(args[key], value):
                origin = _WIRED_FROM.get(key, "the builder")
                raise ConfigError(
                    f"'{key}' is wired from {origin} ({value!r} here) but the config sets {args[key]!r}; "
                    "remove it from the config",
                    path=f"{label}.args.{key}",
                    source=where(f"{label}.args.{key}"),
                )
        kwargs = {**args, **passed}
        try:
            return obj(**kwargs)
        except UsageError:
            raise
        except Exception as exc:
            raise BuildError(
                f"building {self.kind} '{spec['type']}' failed: {type(exc).__name__}: {exc}",
                path=label,
                source=where(label),
            ) from exc

    def signature(self, name: str) -> PartSignature:
        """The arguments of registered part ``name``."""
        return self.entry(name).signature


_WIRED_FROM = {
    "num_classes": "the data's class count",
    "in_dim": "the previous part's output size",
    "in_layout": "the previous part's output layout",
    "sample_rate": "the data's sample rate",
}


def _equal(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:
        return a is b
