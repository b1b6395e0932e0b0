"""What an archive may hold: how many members, how many unpacked bytes, and which member names.

The bounds are checked while the archive streams (:mod:`.members`, :mod:`.writing`), never only
against what its headers claim. A name is accepted only when it can be written below the
destination one component at a time: relative, without ``..``, not too long or too deep, and not
one of the names modforge keeps for its own files there (the marker, the temporary folder).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ...core.errors import UsageError

DEFAULT_MAX_TOTAL_BYTES = 1 << 30
"""Unpacked bytes an archive may hold when the caller does not know better (1 GiB); the catalog
passes each archive's own bound."""
DEFAULT_MAX_MEMBERS = 10_000
"""Members (files and folders) an archive may hold when the caller does not know better."""
MAX_NAME_CHARS = 1024
"""Longest member name accepted; no dataset needs more, and a longer one only serves to outgrow ``PATH_MAX``."""
MAX_DEPTH = 32
"""Most folders a member name may go down."""
CHUNK = 1 << 20
"""Bytes read at a time, from an archive, a member or a file being checked."""

MARKER_PREFIX = ".modforge-extracted-"
"""The marker of a finished extraction is this followed by the archive's name."""
STAGING_PREFIX = ".modforge-extracting-"
"""The temporary folder an extraction unpacks into is this, the archive's name and a random tail."""


@dataclass(frozen=True)
class Limits:
    """The bounds one extraction is held to (checked whole numbers; ``member_bytes <= total_bytes``)."""

    total_bytes: int
    member_bytes: int
    members: int

    @classmethod
    def checked(cls, total: int, member: int | None, members: int) -> Limits:
        """The bounds ``extract_archive`` was given; ``member`` defaults to ``total``."""
        values = []
        for name, value in (("max_total_bytes", total), ("max_member_bytes", total if member is None else member),
                            ("max_members", members)):  # fmt: skip
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise UsageError(f"extract_archive: {name} must be a whole number >= 0, not {value!r}")
            values.append(value)
        return cls(values[0], min(values[1], values[0]), values[2])


def name_problem(name: object) -> str | None:
    """Why ``name`` cannot be written below the destination, or ``None``."""
    if not isinstance(name, str) or not name.strip("/"):
        return "has an empty name"
    if "\x00" in name or "\\" in name:
        return "has a NUL or backslash in its name"
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        return "has an absolute name"
    if len(name) > MAX_NAME_CHARS:
        return f"has a name longer than {MAX_NAME_CHARS} characters"
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        return "leads outside the folder (a '..' in its name)"
    if len(parts) > MAX_DEPTH:
        return f"lies more than {MAX_DEPTH} folders deep"
    if any(len(os.fsencode(p)) > 255 for p in parts):
        return "has a name part longer than 255 bytes"
    if parts and parts[0].startswith((MARKER_PREFIX, STAGING_PREFIX)):
        return "uses a name modforge keeps for its own files"
    return None
