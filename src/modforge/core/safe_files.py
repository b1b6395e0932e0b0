"""Files in folders modforge does not fully trust: never through a link, never a fixed temporary name.

A run folder, a sweep folder or a dataset root may come from someone else (a colleague's
shared scratch folder, an archive from the internet). Anything planted in it — a symbolic
link at the name modforge is about to write, a link out of the folder, a FIFO — must not
make modforge write, read or delete anything outside it. This module is the one way
modforge writes and reuses such folders:

- :func:`atomic_open` / :func:`write_atomic` / :func:`write_via_temp` write a new file under a
  random name made with ``O_EXCL`` (which never follows a link) next to the target, then
  rename it into place: a link planted at the target's name is replaced, not followed.
- :func:`open_append`, :func:`open_lock` and :func:`open_regular` open an *existing* name with
  ``O_NOFOLLOW`` and check on the descriptor that it is one plain regular file.
- :func:`check_folder` is run once on a folder modforge is asked to reuse (``--resume``,
  ``test``, ``--sweep-dir``, ``sweep-report``): no link in it may lead outside it, dangle
  or loop, and every entry is a regular file or a folder.
- :func:`inside` keeps a relative name read from data (a COCO ``file_name``, a trial id)
  inside its root.
- :func:`folder_below` is how every dataset reaches a folder (or file) below the root it was
  given — a COCO split folder, ``tiny-imagenet-200``, a class folder: the root may be a link
  the user named, but what lies below it must resolve inside the root's real path
  (:func:`leads_outside` is the same test for a path found while walking the root).
- :func:`remove_tree` deletes only a real folder inside the folder modforge owns, and only
  when everything in it passes the caller's test of "modforge wrote this".
- :func:`open_bounded_file` (and :func:`read_bounded_file`, :func:`open_text_table`,
  :func:`data_lines`) is how modforge opens a file it is given to *read* — a score file, a
  protocol, a manifest, a picture, a JSON annotation file, a config: only a regular file of at
  most so many bytes, checked before anything is read, never a read that blocks on a FIFO;
  each refusal is one error naming the file.

Where things live: :mod:`.safe_writes` (writing), :mod:`.safe_open` (opening existing names),
:mod:`.safe_reads` (files given to read), :mod:`.safe_paths` (names from data, and
:class:`UnsafePathError`), :mod:`.safe_folders` (folders to reuse or remove). This module
re-exports them all: it is the one name the rest of modforge imports.
"""

from __future__ import annotations

from .safe_folders import MAX_FOLDER_ENTRIES, check_folder, foreign_entry, remove_tree
from .safe_open import open_append, open_lock, open_regular
from .safe_paths import UnsafePathError, folder_below, inside, is_relative_name, leads_outside, relative_name
from .safe_reads import (
    BOUNDED_READ_WORDS,
    MAX_TEXT_TABLE_BYTES,
    Refusal,
    data_lines,
    file_kind,
    open_bounded_file,
    open_text_table,
    read_bounded_file,
)
from .safe_writes import atomic_open, ensure_folder, save_figure, write_atomic, write_via_temp

__all__ = [
    "MAX_FOLDER_ENTRIES",
    "BOUNDED_READ_WORDS",
    "MAX_TEXT_TABLE_BYTES",
    "Refusal",
    "UnsafePathError",
    "atomic_open",
    "check_folder",
    "data_lines",
    "file_kind",
    "ensure_folder",
    "folder_below",
    "foreign_entry",
    "inside",
    "leads_outside",
    "is_relative_name",
    "relative_name",
    "open_append",
    "open_bounded_file",
    "open_lock",
    "open_regular",
    "open_text_table",
    "read_bounded_file",
    "remove_tree",
    "save_figure",
    "write_atomic",
    "write_via_temp",
]
