"""Torch files whose pickle also holds configuration objects (argparse, omegaconf), read without running code.

Checkpoints written by other frameworks — fairseq's above all — pickle their training
configuration next to the tensors: an ``argparse.Namespace`` (``"args"``) or omegaconf
``DictConfig``/``ListConfig`` trees (``"cfg"``). ``torch.load(weights_only=True)`` refuses those
classes, and ``weights_only=False`` would import and call whatever the file names.

:func:`read_with_configs` keeps ``weights_only=True`` (through :func:`.weight_formats.read_torch_file`,
checksums first) and admits exactly the class names in :data:`ADMITTED` — each one bound, for
this load only, to an inert stand-in that merely records what the pickle hands it (never the
real class: omegaconf and argparse are not even imported). The stand-ins are then turned into
plain ``dict``/``list``/scalar values (:func:`plain`). Any other global — ``os.system``,
``builtins.eval``, a fairseq class — is refused by torch's own restricted unpickler before it
is imported, with :class:`~.weight_formats.UnsafeFileError` naming the file and the global.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

from .weight_formats import DamagedFileError, WeightFormatError, read_torch_file

__all__ = ["ADMITTED", "MAX_PICKLE_NODES", "PickledObject", "SharedWalk", "plain", "read_with_configs"]

MAX_PICKLE_NODES = 4_000_000
"""Most containers and items a walk over an unpickled object converts (each shared object once): far
above any configuration or CIFAR batch (CIFAR-100's train file has ~150,000), far below what exhausts
memory."""

_CONTAINERS = ("omegaconf.dictconfig.DictConfig", "omegaconf.listconfig.ListConfig")
_VALUE_NODES = tuple(f"omegaconf.nodes.{name}" for name in (
    "AnyNode", "StringNode", "IntegerNode", "FloatNode", "BooleanNode", "BytesNode", "PathNode", "ValueNode"))  # fmt: skip
_METADATA = ("omegaconf.base.Metadata", "omegaconf.base.ContainerMetadata")
# type objects a pickled omegaconf tree names in its metadata (ref_type, object_type, key_type, element_type)
_TYPE_NAMES = ("typing.Any", "builtins.dict", "builtins.list", "builtins.int", "builtins.float", "builtins.str",
               "builtins.bool", "builtins.bytes", "builtins.object", "builtins.NoneType", "pathlib.Path")  # fmt: skip
# objects a checkpoint carries besides its weights and configuration (a fine-tuned fairseq model's
# task_state holds its target Dictionary): admitted as stand-ins, read as None
_OPAQUE = ("fairseq.data.dictionary.Dictionary",)
#: the pickled globals admitted beyond torch's own tensor machinery, each as an inert stand-in
ADMITTED: tuple[str, ...] = (
    ("argparse.Namespace", "collections.defaultdict") + _CONTAINERS + _VALUE_NODES + _METADATA + _TYPE_NAMES + _OPAQUE
)


class PickledObject:
    """Inert stand-in for an admitted global: records the constructor arguments and the state
    the pickle gives it, and does nothing else (no attribute of the real class exists)."""

    source = "?"  # the pickled global this stand-in replaces

    def __new__(cls, *args: Any, **kwargs: Any) -> PickledObject:
        obj = object.__new__(cls)
        obj.pickled_args, obj.pickled_state = args, None
        return obj

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        self.pickled_state = state

    def __repr__(self) -> str:
        return f"<pickled {self.source}>"


_MAX_DEPTH = 100
"""Deepest nesting :func:`plain` converts (a fairseq configuration nests about 30 deep, stand-ins counted)."""


class SharedWalk:
    """A walk over an unpickled object graph that converts each shared object once, within a budget.

    A pickle refers to an object it already wrote in two bytes (its memo), so a list holding the
    same list 200 times, nested five deep, is a 2 KB file — and 200⁵ items to a walk that treats
    the graph as a tree. :meth:`once` memoises each conversion (by the object's id, or a key that
    also holds what else the result depends on) and counts the objects and items it converts; past
    ``max_nodes`` it raises ``refuse(message)``, one clear error instead of an exhausted machine.
    """

    def __init__(self, refuse: Callable[[str], Exception], max_nodes: int = MAX_PICKLE_NODES):
        self.max_nodes = max_nodes
        self._refuse = refuse
        self._memo: dict[Hashable, tuple[Any, Any]] = {}
        self._nodes = 0

    def once(self, value: Any, convert: Callable[[], Any], key: Hashable | None = None) -> Any:
        """``convert()`` the first time ``key`` (default ``id(value)``) is met, the same result after.

        ``value`` is kept alive with its result, so an id is never reused by another object during
        the walk (a temporary a stand-in's conversion makes included)."""
        key = id(value) if key is None else key
        hit = self._memo.get(key)
        if hit is not None:
            return hit[1]
        self._nodes += 1 + (len(value) if isinstance(value, (dict, list, tuple)) else 0)
        if self._nodes > self.max_nodes:
            raise self._refuse(f"more than {self.max_nodes} objects and items (a pickle nesting shared "
                               "references over and over)")  # fmt: skip
        result = convert()
        self._memo[key] = (value, result)
        return result


def _empty_dict(*_args: Any) -> dict:
    """``collections.defaultdict(factory)`` read as a plain dict (omegaconf's resolver caches)."""
    return {}


def _stand_ins() -> list[tuple[Any, str]]:
    out: list[tuple[Any, str]] = [(_empty_dict, "collections.defaultdict")]
    for name in ADMITTED:
        if name != "collections.defaultdict":
            out.append((type(name.rpartition(".")[2], (PickledObject,), {"source": name}), name))
    return out


def read_with_configs(path: str | os.PathLike, *, map_location: str = "cpu") -> Any:
    """The content of torch file ``path`` with its pickled argparse/omegaconf objects as plain
    dicts, lists and values — ``torch.load(weights_only=True)`` admitting :data:`ADMITTED` as
    inert stand-ins for this call only.

    Raises:
        UnsafeFileError: the pickle names any other global (nothing was imported or run);
        DamagedFileError: damaged, or stand-ins used in a way no configuration is pickled;
        WeightFormatError: missing file.
    """
    import torch.serialization

    path = Path(path)
    try:
        with torch.serialization.safe_globals(_stand_ins()):
            loaded = read_torch_file(path, map_location=map_location)
    except WeightFormatError:
        raise
    except (TypeError, AttributeError) as exc:  # a stand-in called or built in a way no config is pickled
        raise DamagedFileError(f"{path} is not a readable checkpoint ({type(exc).__name__}: {exc})"[:300]) from None
    return plain(loaded, what=str(path))


def plain(value: Any, *, what: str, max_nodes: int = MAX_PICKLE_NODES) -> Any:
    """``value`` with every stand-in replaced by plain data: a ``DictConfig``/``Namespace`` by a
    dict, a ``ListConfig`` by a list, a value node by its value, an opaque object (a fairseq
    ``Dictionary``) by None. Tensors and plain containers pass through (their items converted).

    Each object the pickle shares is converted once (:class:`SharedWalk`): the result shares it
    the same way, and a file nesting one list in itself over and over is one error, not an
    exponential walk.

    Raises:
        DamagedFileError: nested more than 100 deep, more than ``max_nodes`` objects and items,
            a stand-in where no configuration puts it.
    """
    walk = SharedWalk(lambda message: DamagedFileError(f"{what}: {message}"), max_nodes)
    try:
        return _plain(value, what, walk, 0)
    except RecursionError:  # only where the interpreter's stack is already deep when plain is called
        raise _too_deep(what) from None


def _too_deep(what: str) -> DamagedFileError:
    return DamagedFileError(f"{what}: configuration nested more than {_MAX_DEPTH} deep")


def _plain(value: Any, what: str, walk: SharedWalk, depth: int) -> Any:
    if depth > _MAX_DEPTH:
        raise _too_deep(what)
    if isinstance(value, (dict, list, tuple, PickledObject)):
        return walk.once(value, lambda: _plain_node(value, what, walk, depth))
    if isinstance(value, type):
        raise DamagedFileError(f"{what}: a class ({value.__name__}) where a configuration value was expected")
    return value


def _plain_node(value: Any, what: str, walk: SharedWalk, depth: int) -> Any:
    """One container or stand-in of :func:`plain`, its items converted."""
    if isinstance(value, dict):  # OrderedDict state dicts stay as they are, items converted
        converted = {k: _plain(v, what, walk, depth + 1) for k, v in value.items()}
        if type(value) is dict:
            return converted
        value.update(converted)
        return value
    if isinstance(value, (list, tuple)):
        items = [_plain(v, what, walk, depth + 1) for v in value]
        return items if isinstance(value, list) else tuple(items)
    state = value.pickled_state
    if value.source in _OPAQUE:
        return None
    if value.source == "argparse.Namespace":
        return _plain(_attributes(value, what), what, walk, depth + 1)
    if value.source in _VALUE_NODES:
        return _plain(_attributes(value, what).get("_val"), what, walk, depth + 1)
    if value.source in _CONTAINERS:
        content = _attributes(value, what).get("_content")
        if content is None or isinstance(content, str):  # None, "???" (missing) or an unresolved interpolation
            return content
        if value.source.endswith("DictConfig") and not isinstance(content, dict):
            raise DamagedFileError(f"{what}: a DictConfig whose content is a {type(content).__name__}")
        return _plain(content, what, walk, depth + 1)
    raise DamagedFileError(f"{what}: {value.source} where a configuration value was expected (state {type(state)})")


def _attributes(obj: PickledObject, what: str) -> dict[str, Any]:
    """The attribute dict a pickled object's state carries (``__dict__``, or ``(dict, slots)``)."""
    state = obj.pickled_state
    if isinstance(state, tuple) and len(state) == 2:
        state = {**(state[0] or {}), **(state[1] or {})}
    if not isinstance(state, dict):
        raise DamagedFileError(f"{what}: a pickled {obj.source} without its attributes")
    return state
