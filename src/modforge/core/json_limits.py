"""Reading JSON that comes with data (a COCO annotation file, a generated set's ``meta.json``)
within bounds: a size limit checked before anything is read, and a nesting-depth limit checked
on the bytes before they are parsed.

Python's JSON parser recurses once per nesting level: a file of 200,000 ``[`` raises
``RecursionError`` deep inside it (and a document a little below the interpreter's limit
parses, then breaks the first ``repr`` or walk that meets it). :func:`read_json` refuses such a
file with one line naming it and the limit, before parsing. The depth is measured with numpy on
the raw bytes (about a second for a 500 MB COCO file, a fraction of the parse), so a limit
costs little even on the largest annotation files.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from .errors import UsageError
from .safe_files import read_bounded_file
from .text_safety import plain_text

__all__ = ["MAX_JSON_BYTES", "MAX_JSON_DEPTH", "JsonLimitError", "json_depth", "read_json"]

MAX_JSON_BYTES = 64 * 1024 * 1024
"""Default size limit of a JSON file read from data (metadata); large readers pass their own."""

MAX_JSON_DEPTH = 64
"""Default limit on nested arrays/objects. COCO needs 5 (``annotations[i].segmentation[j][k]``)."""

_QUOTE, _BACKSLASH = ord('"'), ord("\\")
_OPEN = (ord("["), ord("{"))
_CLOSE = (ord("]"), ord("}"))
_CHUNK = 1 << 24


_JSON_WORDS = {
    "missing": "{what} not found: {shown}",
    "not regular": "{what} {shown} is not a regular file but {kind}",
    "too large": "{what} {shown} is {size} bytes, more than the {max_bytes} a JSON file may have",
    "grew": "{what} {shown} is more than the {max_bytes} bytes a JSON file may have",
    "unreadable": "cannot read {what} {shown}: {detail}",
}
"""How :func:`read_json` words a file :func:`~modforge.core.safe_files.read_bounded_file` refuses."""


class JsonLimitError(UsageError):
    """A JSON file from data that is missing, unreadable, not JSON, too large or nested too deep."""


def json_depth(data: bytes) -> int:
    """The deepest nesting of arrays and objects in the JSON text ``data`` (0: a scalar).

    Brackets inside strings are not counted (escaped quotes are honoured). Meant for valid
    JSON; on invalid text the result is only an estimate (the parser then rejects it).
    """
    a = np.frombuffer(data, dtype=np.uint8)
    found = []
    for start in range(0, a.size, _CHUNK):  # in chunks: the masks stay small next to the text
        part = a[start : start + _CHUNK]
        mask = part == _QUOTE
        for code in (_BACKSLASH, *_OPEN, *_CLOSE):
            mask |= part == code
        found.append(np.flatnonzero(mask) + start)
    where = np.concatenate(found) if found else np.zeros(0, dtype=np.int64)
    if not where.size:
        return 0
    kinds = a[where]
    backslashes = where[kinds == _BACKSLASH]
    quotes = where[kinds == _QUOTE]
    if backslashes.size:  # a backslash at an even place of its run escapes the next byte
        run_start = np.ones(backslashes.size, dtype=bool)
        run_start[1:] = backslashes[1:] != backslashes[:-1] + 1
        run_id = np.cumsum(run_start) - 1
        first = backslashes[run_start]
        escaping = ((backslashes - first[run_id]) % 2) == 0
        escaped = backslashes[escaping] + 1
        quotes = quotes[~np.isin(quotes, escaped)]
    brackets = where[np.isin(kinds, _OPEN + _CLOSE)]
    outside = (np.searchsorted(quotes, brackets) % 2) == 0  # an even number of quotes before it
    brackets = brackets[outside]
    if not brackets.size:
        return 0
    opening = np.isin(a[brackets], _OPEN)
    steps = np.where(opening, 1, -1).astype(np.int64)
    return int(np.cumsum(steps).max())


def read_json(
    path: str | os.PathLike,
    *,
    what: str = "JSON file",
    max_bytes: int = MAX_JSON_BYTES,
    max_depth: int = MAX_JSON_DEPTH,
    error: type[UsageError] = JsonLimitError,
) -> Any:
    """The parsed content of the JSON file ``path``, refused (one line naming ``what`` and the
    file) when it is not a regular file (read through
    :func:`~modforge.core.safe_files.read_bounded_file`: a FIFO or device is never opened for a
    blocking read), is larger than ``max_bytes``, nests deeper than ``max_depth``, or is not
    valid UTF-8 JSON.

    Raises:
        ``error`` (a :class:`~modforge.core.errors.UsageError`; :class:`JsonLimitError` by default).
    """
    shown = plain_text(os.fspath(path))
    data = read_bounded_file(path, what=what, max_bytes=max_bytes, error=error, words=_JSON_WORDS)
    try:  # UTF-8 only: json.loads(bytes) would also take UTF-16/32, whose brackets json_depth does not see
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise error(f"{what} {shown} is not UTF-8 text") from None
    depth = json_depth(data)
    if depth > max_depth:
        raise error(f"{what} {shown} nests arrays/objects {depth} deep, more than the {max_depth} allowed")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"{shown}:{exc.lineno}:{exc.colno}: not valid JSON ({exc.msg})") from None
    except RecursionError:  # only if max_depth is set above what the interpreter allows
        raise error(f"{what} {shown} nests arrays/objects deeper than the parser allows") from None
