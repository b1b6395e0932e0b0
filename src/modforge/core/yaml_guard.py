"""Reading and safe-loading config files that may be hostile or simply broken.

A config is small, tree-shaped text, and everything downstream (line recording,
``_base_`` merges, deep copies, validation) walks it recursively.  This module makes
sure only input of that shape gets through, and refuses the rest quickly with one
:class:`~modforge.core.errors.ConfigError` that names the file (and line):

* the path must be a regular file no larger than :data:`MAX_CONFIG_BYTES`; a FIFO,
  device, socket or symlink loop is refused without ever blocking on it;
* before anything is composed, one linear pass over the parser's events bounds the
  nesting depth (:data:`MAX_DEPTH`) and the *expanded* size of the document
  (:data:`MAX_NODES`, counting every alias as a full copy of its anchor, which is how
  the recursive walks will see it), and refuses recursive aliases;
* keys that would collapse into one Python dict key (``lr`` twice, ``1`` and ``01``,
  ``true`` and ``True``) are an error naming both lines, instead of the last silently
  winning;
* only ``yaml.SafeLoader`` constructs values: a ``!!python/...`` tag is an error,
  never code.
"""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import yaml
from yaml.events import (
    AliasEvent,
    CollectionEndEvent,
    CollectionStartEvent,
    DocumentStartEvent,
    Event,
    NodeEvent,
)
from yaml.nodes import MappingNode, Node, ScalarNode

from .errors import ConfigFileError, ConfigSyntaxError
from .safe_files import Refusal, read_bounded_file

__all__ = ["MAX_CONFIG_BYTES", "MAX_DEPTH", "MAX_NODES", "read_config_text", "safe_yaml_load"]

#: Largest config file read, in bytes.  Real configs are a few KiB; this only stops a
#: mistyped path (a dataset, a checkpoint) from being read into memory and parsed.
MAX_CONFIG_BYTES = 16 * 1024 * 1024
#: Deepest nesting of mappings and lists (aliases included).  Configs nest perhaps a
#: dozen levels; 64 keeps every recursive walk far below Python's recursion limit.
MAX_DEPTH = 64
#: Most nodes a document may expand to, each alias counted as a full copy of the node it
#: refers to.  Generous for any hand-written config, yet small enough that the
#: recursive walks over the loaded tree stay fast.
MAX_NODES = 200_000

_MERGE_TAG = "tag:yaml.org,2002:merge"
_SAFE_HINT = " (configs are loaded with safe YAML: Python tags are refused)"


# ---------------------------------------------------------------------- reading
def _refused(refusal: Refusal, shown: str) -> ConfigFileError:
    """A config file's own words for why :func:`~modforge.core.safe_files.open_bounded_file` refused it."""
    if refusal.reason == "missing":
        return ConfigFileError("config file not found", source=shown)
    if refusal.reason == "loop":
        return ConfigFileError("config path is a symlink loop (too many levels of symbolic links)", source=shown)
    if refusal.reason == "not regular" and stat.S_ISDIR(refusal.mode):
        return ConfigFileError("expected a YAML file, got a directory", source=shown)
    if refusal.reason == "not regular":
        return ConfigFileError(f"expected a regular YAML file, got {refusal.kind}", source=shown)
    if refusal.reason == "too large":
        size = MAX_CONFIG_BYTES + 1 if refusal.size is None else refusal.size  # None: it grew while read
        return ConfigFileError(f"config file is too large ({size / 2**20:.1f} MiB; at most "
                               f"{MAX_CONFIG_BYTES // 2**20} MiB is read)", source=shown)  # fmt: skip
    return ConfigFileError(f"cannot read config file: {refusal.detail}", source=shown)


def read_config_text(path: Path, shown: str) -> str:
    """The text of the config file at ``path``, checked before and while it is read.

    Only a regular file of at most :data:`MAX_CONFIG_BYTES` is read, through
    :func:`~modforge.core.safe_files.read_bounded_file`: the type is checked with
    ``os.stat`` first and again on the opened descriptor, which is opened non-blocking,
    so a FIFO (or a file swapped for one) can never hang the load.

    Raises:
        ConfigFileError: missing, a directory, a FIFO/device/socket, a symlink loop,
            too large, unreadable or not UTF-8 — always naming ``shown``.
    """
    raw = read_bounded_file(path, what="config file", max_bytes=MAX_CONFIG_BYTES,
                            refuse=lambda refusal: _refused(refusal, shown))  # fmt: skip
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigFileError(f"not a UTF-8 text file ({exc.reason} at byte {exc.start})", source=shown) from None


# ---------------------------------------------------------------------- parsing
class _ReplayLoader(yaml.composer.Composer, yaml.constructor.SafeConstructor, yaml.resolver.Resolver):
    """A ``SafeLoader`` that composes from already-parsed events instead of text.

    The text is scanned and parsed once (by :func:`_checked_events`); composing the
    node tree and constructing the data then replay those events.
    """

    def __init__(self, events: list[Event]):
        self._events = events
        self._next = 0
        yaml.composer.Composer.__init__(self)
        yaml.constructor.SafeConstructor.__init__(self)
        yaml.resolver.Resolver.__init__(self)

    def check_event(self, *choices: type) -> bool:
        if self._next >= len(self._events):
            return False
        return not choices or isinstance(self._events[self._next], choices)

    def peek_event(self) -> Event:
        return self._events[self._next]

    def get_event(self) -> Event:
        event = self._events[self._next]
        self._next += 1
        return event


def _at(shown: str, event: Event | Node) -> str:
    return f"{shown}:{event.start_mark.line + 1}"


def _checked_events(text: str, shown: str) -> list[Event]:
    """Parse ``text`` into events, refusing too-deep, too-large or recursive documents.

    One pass, no recursion: a stack holds ``[size, height]`` of every open collection;
    a finished anchored node leaves its size (nodes, expanded) and height (collection
    levels) behind, and an alias adds those to its parent as a copy would.  An alias
    to an anchor whose node is still open would make the tree infinite.
    """
    loader = yaml.SafeLoader(text)
    events: list[Event] = []
    stack: list[list[int]] = []  # [expanded size, height of the highest child]
    open_ids: list[int | None] = []  # anchor id of each open collection
    anchors: dict[str, int] = {}  # anchor name -> id of the node it names now
    finished: dict[int, tuple[int, int]] = {}  # anchor id -> (size, height)
    total = 0
    next_id = 0
    try:
        while loader.check_event():
            event = loader.get_event()
            events.append(event)
            if isinstance(event, DocumentStartEvent):
                anchors.clear()
                continue
            if not isinstance(event, (NodeEvent, CollectionEndEvent)):
                continue
            if isinstance(event, CollectionEndEvent):
                size, height = stack.pop()
                anchor_id = open_ids.pop()
                child = (size, height + 1)
                if anchor_id is not None:
                    finished[anchor_id] = child
            elif isinstance(event, AliasEvent):
                if event.anchor not in anchors:
                    continue  # undefined alias: composing reports it with its line
                anchor_id = anchors[event.anchor]
                if anchor_id not in finished:
                    raise ConfigSyntaxError(
                        f"invalid YAML: alias '*{event.anchor}' refers to a node that contains it "
                        "(a recursive alias); a config must be a tree",
                        source=_at(shown, event),
                    )
                child = finished[anchor_id]
                total += child[0]
                if len(stack) + child[1] > MAX_DEPTH:
                    raise _too_deep(shown, event, via_alias=True)
            else:
                total += 1
                anchor_id = None
                if event.anchor is not None:
                    next_id += 1
                    anchor_id = next_id
                    anchors[event.anchor] = anchor_id
                if isinstance(event, CollectionStartEvent):
                    if len(stack) >= MAX_DEPTH:
                        raise _too_deep(shown, event, via_alias=False)
                    stack.append([1, 0])
                    open_ids.append(anchor_id)
                    child = None
                else:  # a scalar
                    child = (1, 0)
                    if anchor_id is not None:
                        finished[anchor_id] = child
            if total > MAX_NODES:
                raise ConfigSyntaxError(
                    f"invalid YAML: the document expands to more than {MAX_NODES:,} nodes "
                    "(every alias counts as a full copy of its anchor); a config must stay below that",
                    source=_at(shown, event),
                )
            if child is not None and stack:
                stack[-1][0] += child[0]
                stack[-1][1] = max(stack[-1][1], child[1])
    finally:
        loader.dispose()
    return events


def _too_deep(shown: str, event: Event, *, via_alias: bool) -> ConfigSyntaxError:
    how = " once aliases are expanded" if via_alias else ""
    return ConfigSyntaxError(
        f"invalid YAML: mappings and lists nest more than {MAX_DEPTH} levels deep{how}; "
        f"a config may nest at most {MAX_DEPTH} levels",
        source=_at(shown, event),
    )


def _show_key(text: str) -> str:
    return repr(text if len(text) <= 60 else text[:57] + "...")


def _check_duplicate_keys(root: Node, shown: str) -> None:
    """Refuse two keys of one mapping that would become one Python dict key.

    Keys are compared by their constructed value, so ``1``/``01``/``1.0`` and
    ``true``/``True`` collide as they would in the loaded dict.  A ``<<`` merge key
    brings in keys that the mapping may override, as YAML intends; it may appear once.
    Each node is visited once (aliases share nodes), without recursion.
    """
    keys_of = yaml.constructor.SafeConstructor()
    seen: set[int] = set()
    todo: list[Node] = [root]
    while todo:
        node = todo.pop()
        if id(node) in seen or isinstance(node, ScalarNode):
            continue
        seen.add(id(node))
        pairs = node.value if isinstance(node, MappingNode) else [(None, item) for item in node.value]
        first: dict[Any, ScalarNode] = {}
        for key_node, value_node in pairs:
            todo.append(value_node)
            if not isinstance(key_node, ScalarNode):
                if key_node is not None:
                    todo.append(key_node)
                continue
            if key_node.tag == _MERGE_TAG:
                key: Any = ("<<", _MERGE_TAG)
            else:
                try:
                    key = keys_of.construct_object(key_node)
                    hash(key)
                except Exception:  # noqa: BLE001 - constructing reports it properly later
                    key = (key_node.tag, key_node.value)
            if key not in first:
                first[key] = key_node
                continue
            earlier = first[key]
            also = "" if earlier.value == key_node.value else f" as {_show_key(earlier.value)}"
            hint = "; to merge several mappings write '<<: [*a, *b]'" if key_node.tag == _MERGE_TAG else ""
            raise ConfigSyntaxError(
                f"invalid YAML: duplicate key {_show_key(key_node.value)} in one mapping "
                f"(first at line {earlier.start_mark.line + 1}{also}); a mapping's keys must be unique{hint}",
                source=_at(shown, key_node),
            )


def safe_yaml_load(text: str, shown: str) -> tuple[Node | None, Any]:
    """Safe-load one YAML document: its node tree (for line numbers) and its data.

    The node tree is returned as composed, before merge keys are flattened into it.
    Loading fails fast, before anything recursive runs, on input that is too deep,
    expands to too many nodes or aliases itself (see :func:`_checked_events`).

    Raises:
        ConfigSyntaxError: invalid YAML, a refused tag, too deep or too large once
            expanded, a recursive alias or a duplicate key — with ``shown:line``.
    """
    try:
        events = _checked_events(text, shown)
        node = _ReplayLoader(events).get_single_node()
        if node is None:
            return None, None
        _check_duplicate_keys(node, shown)
        data = _ReplayLoader(events).get_single_data()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{shown}:{mark.line + 1}:{mark.column + 1}" if mark else shown
        problem = " ".join((exc.problem or exc.context or "invalid YAML").split())
        if "python/" in str(exc):
            problem += _SAFE_HINT
        raise ConfigSyntaxError(f"invalid YAML: {problem}", source=where) from None
    except yaml.reader.ReaderError as exc:
        raise ConfigSyntaxError(
            f"invalid YAML: {exc.reason} (character {exc.character!r} at position {exc.position})", source=shown
        ) from None
    except yaml.YAMLError as exc:
        raise ConfigSyntaxError("invalid YAML: " + " ".join(str(exc).split()), source=shown) from None
    return node, data


def load_value(text: str, shown: str) -> Any:
    """One YAML value typed on the command line (an override, a flag), under the same limits
    as a config file.

    Raises:
        ConfigSyntaxError: too deep, too large once expanded, or a recursive alias.
        yaml.YAMLError: not valid YAML (callers may then take the text as it is).
    """
    return _ReplayLoader(_checked_events(text, shown)).get_single_data()
