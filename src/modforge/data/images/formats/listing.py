"""Pictures named by a folder tree or by a manifest: which files, with which labels.

* :func:`list_image_folder` — one sub-folder per class, as torchvision's ``ImageFolder`` reads it: the
  same ``(path, label)`` list, in the same order, and the same class list, so a model trained with either
  sees the same samples. Unlike ``ImageFolder`` it refuses links that lead out of the folder (a shared
  dataset folder must not make a run read someone's home), a link loop, and special files (a FIFO named
  ``x.png`` would hang a worker).
* :func:`read_image_manifest` — a CSV (or parquet) table ``path,label[,split]``; every path stays inside the
  manifest's root.
"""

from __future__ import annotations

import csv
import os
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ....core.safe_files import (
    MAX_TEXT_TABLE_BYTES,
    UnsafePathError,
    file_kind,
    inside,
    leads_outside,
    open_bounded_file,
    read_bounded_file,
    relative_name,
)
from ....core.text_safety import quoted
from . import ImageDataError, ImagePathError, MissingImageDataError

__all__ = [
    "IMG_EXTENSIONS",
    "MANIFEST_COLUMNS",
    "PathGuard",
    "list_image_folder",
    "manifest_classes",
    "read_image_manifest",
]

IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
"""torchvision's ``IMG_EXTENSIONS``: the file endings taken as pictures (compared case-insensitively)."""

MANIFEST_COLUMNS = ("path", "label", "split")
"""The columns of a manifest (``split`` optional; other columns are ignored)."""

PARQUET_SUFFIXES = (".parquet", ".pq")

MAX_MANIFEST_BYTES = MAX_TEXT_TABLE_BYTES
"""Largest manifest read (1 GiB, as a protocol or score file): checked before it is read."""


# ----------------------------------------------------------------------------- a folder per class
def _class_name_ok(name: Any) -> bool:
    return isinstance(name, str) and name not in ("", ".", "..") and "/" not in name and "\\" not in name \
        and "\x00" not in name  # fmt: skip


def _walk(top: str, real_top: Path, real_root: Path, extensions: tuple[str, ...]) -> list[tuple[str, list[str]]]:
    """``sorted(os.walk(top, followlinks=True))`` reduced to (folder, sorted picture names), checking that
    every link followed or listed stays inside ``real_root`` and that no link loops."""
    found: list[tuple[str, list[str]]] = []
    pending: list[tuple[str, tuple[Path, ...]]] = [(top, (real_top,))]
    while pending:
        folder, chain = pending.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError as exc:
            raise ImageDataError(f"cannot read the folder {folder} ({exc.strerror or exc})") from None
        names = []
        for entry in entries:
            try:
                is_dir = entry.is_dir()  # follows links, as os.walk(followlinks=True)
            except OSError:
                is_dir = False
            link = entry.is_symlink()
            if is_dir:
                real = Path(os.path.realpath(entry.path)) if link else chain[-1] / entry.name
                if link and leads_outside(entry.path, real_root) is not None:
                    raise ImagePathError(f"{entry.path} is a symbolic link to {real}, outside the image folder "
                                         f"{real_root}; refused (copy the pictures in, or link the whole folder)")  # fmt: skip
                if real in chain:
                    raise ImageDataError(f"{entry.path} is a symbolic link back to {real}, which contains it: "
                                         "the folder tree loops; remove the link")  # fmt: skip
                pending.append((entry.path, (*chain, real)))
            elif entry.name.lower().endswith(extensions):
                _check_picture_entry(entry, link, real_root)
                names.append(entry.name)
        found.append((folder, sorted(names)))
    found.sort()
    return found


def _check_picture_entry(entry: os.DirEntry, link: bool, real_root: Path) -> None:
    if link:
        if not os.path.exists(entry.path):
            raise ImageDataError(f"{entry.path} is a symbolic link to {os.readlink(entry.path)}, which does not "
                                 "exist; remove it")  # fmt: skip
        target = leads_outside(entry.path, real_root)
        if target is not None:
            raise ImagePathError(f"{entry.path} is a symbolic link to {target}, outside the image folder "
                                 f"{real_root}; refused")  # fmt: skip
        if not os.path.isfile(entry.path):
            raise ImageDataError(f"{entry.path} is a symbolic link to something that is not a regular file")
    elif not entry.is_file(follow_symlinks=False):
        raise ImageDataError(f"{entry.path} is not a regular file (a FIFO, socket or device); remove it")


def list_image_folder(
    root: str | os.PathLike, classes: list[str] | None = None, extensions: Sequence[str] = IMG_EXTENSIONS
) -> tuple[list[tuple[Path, int]], list[str]]:
    """The pictures of a folder holding one sub-folder per class: ``([(path, label), ...], class_names)``.

    Classes are the sub-folders' names, sorted (hidden ones included, as ``ImageFolder`` does), unless
    ``classes`` is given: then exactly those folders, label ``k`` for ``classes[k]``, other folders ignored.
    A picture is a file ending in one of ``extensions`` (any case) anywhere under its class folder (links to
    folders followed). The list is what ``torchvision.datasets.ImageFolder(root).samples`` holds (and, with
    ``classes``, what torchvision's ``make_dataset(root, {name: k})`` gives): class folders in sorted name
    order, then folders in sorted path order, then files in sorted name order.

    Raises:
        MissingImageDataError: no such folder, no class folder, a class folder of ``classes`` missing.
        ImageDataError: a class folder without pictures, a link loop, a special file.
        ImagePathError: a link leading out of ``root``.
    """
    top = os.fspath(root)
    if not os.path.isdir(top):
        raise MissingImageDataError(f"image folder not found: {top} (expected one sub-folder per class, each "
                                    "holding that class' pictures)")  # fmt: skip
    real_root = Path(top).resolve()
    exts = tuple(str(e).lower() for e in extensions)
    if not exts or not all(exts):
        raise ImageDataError(
            f"list_image_folder: extensions must be non-empty endings such as '.png', got {extensions!r}"
        )
    if classes is None:
        names = []
        try:
            entries = list(os.scandir(top))
        except OSError as exc:
            raise ImageDataError(f"cannot read the image folder {top} ({exc.strerror or exc})") from None
        for entry in entries:
            try:
                is_dir = entry.is_dir()
            except OSError:
                continue
            if is_dir:
                names.append(entry.name)
        class_names = sorted(names)
        if not class_names:
            raise MissingImageDataError(f"{top}: no class folder (expected one sub-folder per class, each holding "
                                        "that class' pictures)")  # fmt: skip
    else:
        class_names = list(classes)
        bad = next((c for c in class_names if not _class_name_ok(c)), None)
        if not class_names or bad is not None:
            raise ImageDataError(f"{top}: classes must be a non-empty list of folder names (no '/', '..'), "
                                 f"got {bad!r}")  # fmt: skip
        if len(set(class_names)) != len(class_names):
            twice = sorted({c for c in class_names if class_names.count(c) > 1})
            raise ImageDataError(f"{top}: classes lists {', '.join(twice)} more than once")
        missing = [c for c in class_names if not os.path.isdir(os.path.join(top, c))]
        if missing:
            raise MissingImageDataError(f"{top}: class folder(s) {', '.join(missing)} not found (expected one "
                                        f"sub-folder for each of the {len(class_names)} classes given)")  # fmt: skip
    label_of = {name: k for k, name in enumerate(class_names)}
    samples: list[tuple[Path, int]] = []
    empty = []
    for name in sorted(class_names):
        target = os.path.join(top, name)
        if os.path.islink(target) and leads_outside(target, real_root) is not None:
            raise ImagePathError(f"{target} is a symbolic link to {os.path.realpath(target)}, outside the image "
                                 f"folder {real_root}; refused")  # fmt: skip
        count = len(samples)
        for folder, files in _walk(target, Path(os.path.realpath(target)), real_root, exts):
            samples.extend((Path(os.path.join(folder, f)), label_of[name]) for f in files)
        if len(samples) == count:
            empty.append(name)
    if empty:
        raise ImageDataError(f"{top}: no picture in the class folder(s) {', '.join(empty)} (expected files ending "
                             f"in {', '.join(exts)})")  # fmt: skip
    return samples, class_names


# ----------------------------------------------------------------------------- manifests
class PathGuard:
    """:func:`~modforge.core.safe_files.inside` for many names under one root, with each folder resolved once
    (a manifest of a million pictures in a thousand folders costs a thousand ``realpath`` calls, not a million).

    ``guard(name, what)`` is ``root / name`` when ``name`` is relative, without ``..``, and neither its folder
    nor the file itself is a link leading out of ``root``; otherwise :func:`inside` raises its message,
    as an :class:`~.ImagePathError`.
    """

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self.real_root = self.root.resolve()
        self._folders: dict[Path, bool] = {}

    def _within(self, path: Path) -> bool:
        return path == self.real_root or path.is_relative_to(self.real_root)

    def __call__(self, name: str, what: str) -> Path:
        try:
            text = relative_name(name, what, self.root)
            target = self.root / text
            ok = self._folders.get(target.parent)
            if ok is None:
                try:
                    ok = self._within(target.parent.resolve())
                except (OSError, RuntimeError):
                    ok = False
                self._folders[target.parent] = ok
            if ok and os.path.islink(target):
                try:
                    ok = self._within(target.resolve())
                except (OSError, RuntimeError):
                    ok = False
            return target if ok else inside(self.root, text, what)
        except UnsafePathError as exc:
            raise ImagePathError(str(exc)) from None


def _cell(value: Any) -> str | None:
    """A manifest cell as text (integers, as in a parquet ``label`` column, become their digits)."""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def _header(columns: Sequence[str], path: Path) -> dict[str, int]:
    index: dict[str, int] = {}
    for k, column in enumerate(columns):
        name = str(column).strip()
        if name in index:
            raise ImageDataError(f"{path}: the column {quoted(name)} appears twice in the header")
        index[name] = k
    missing = [c for c in MANIFEST_COLUMNS[:2] if c not in index]
    if missing:
        got = ",".join(str(c) for c in columns)
        raise ImageDataError(f"{path}: the header lacks the column(s) {', '.join(missing)} (expected a header "
                             f"line path,label[,split]; got {quoted(got)})")  # fmt: skip
    return index


def _rows_csv(path: Path) -> tuple[dict[str, int], Iterable[tuple[str, list[Any]]]]:
    data = read_bounded_file(path, what="manifest", max_bytes=MAX_MANIFEST_BYTES, error=ImageDataError)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ImageDataError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}); expected a CSV "
                             "manifest path,label[,split]") from None  # fmt: skip
    reader = csv.reader(text.splitlines(keepends=True))
    try:
        header = next((row for row in reader if any(cell.strip() for cell in row)), None)
    except csv.Error as exc:
        raise ImageDataError(f"{path}: line {reader.line_num}: not valid CSV ({exc})") from None
    if header is None:
        raise ImageDataError(
            f"{path}: empty manifest (expected a header line path,label[,split] and one line per picture)"
        )
    index = _header(header, path)

    def rows() -> Iterable[tuple[str, list[Any]]]:
        try:
            for row in reader:
                if not any(cell.strip() for cell in row):
                    continue
                if len(row) != len(header):
                    raise ImageDataError(f"{path}: line {reader.line_num}: {len(row)} fields, the header has "
                                         f"{len(header)} ({quoted(','.join(header))})")  # fmt: skip
                yield f"line {reader.line_num}", row
        except csv.Error as exc:
            raise ImageDataError(f"{path}: line {reader.line_num}: not valid CSV ({exc})") from None

    return index, rows()


def _rows_parquet(path: Path) -> tuple[dict[str, int], Iterable[tuple[str, list[Any]]]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        pq = None
    try:
        with open_bounded_file(path, what="manifest", max_bytes=MAX_MANIFEST_BYTES, error=ImageDataError) as handle:
            if pq is not None:
                table = pq.read_table(handle)
                columns = list(table.column_names)
                data = [table.column(k).to_pylist() for k in range(len(columns))]
            else:
                try:
                    import pandas
                except ImportError:
                    raise ImageDataError(f"{path}: reading a parquet manifest needs pyarrow, which is not installed "
                                         "(pip install pyarrow), or write the manifest as CSV with the header "
                                         "path,label[,split]") from None  # fmt: skip
                frame = pandas.read_parquet(handle)
                columns = [str(c) for c in frame.columns]
                data = [frame[c].tolist() for c in frame.columns]
    except ImageDataError:
        raise
    except ImportError as exc:
        raise ImageDataError(f"{path}: reading a parquet manifest needs pyarrow (pip install pyarrow): {exc}") from None
    except Exception as exc:  # pyarrow and pandas raise many kinds for a damaged file
        raise ImageDataError(
            f"{path}: not a readable parquet manifest ({type(exc).__name__}: {str(exc)[:200]})"
        ) from None
    index = _header(columns, path)
    return index, ((f"row {k + 1}", list(row)) for k, row in enumerate(zip(*data, strict=True)))


def read_image_manifest(
    path: str | os.PathLike, root: str | os.PathLike | None = None
) -> list[tuple[Path, str, str | None]]:
    """The pictures a manifest lists: ``[(file, label, split or None), ...]`` in the manifest's order.

    A manifest is a CSV file with a header line naming the columns ``path``, ``label`` and optionally
    ``split`` (other columns are ignored), or a parquet file with those columns (``.parquet``/``.pq``; read
    with pyarrow, or pandas, when installed). ``path`` is relative to ``root`` (default: the manifest's
    folder) and must stay inside it (no absolute name, no ``..``, no link leading out). An empty ``split``
    cell is None. Whether the files exist is not checked here (opening them is), but a path naming a FIFO,
    device, socket or folder is refused here, naming its line. The manifest itself is read only when it is a
    regular file of at most :data:`MAX_MANIFEST_BYTES` (:func:`~modforge.core.safe_files.read_bounded_file`:
    checked before anything is read, a FIFO never waited on).

    Raises:
        MissingImageDataError: no such manifest.
        ImageDataError: the manifest is no regular file or larger than :data:`MAX_MANIFEST_BYTES`, no header
            or a column missing, a row with a wrong number of fields, an empty path or label, a path that is
            no regular file (naming the file and line), a parquet file without pyarrow installed.
        ImagePathError: a path leading outside ``root`` (naming the file and line).
    """
    path = Path(path)
    if not path.exists():  # anything else there is refused by the bounded open, saying what it is
        raise MissingImageDataError(
            f"manifest not found: {path} (expected a CSV file with the header path,label[,split])"
        )
    base = Path(root) if root is not None else path.parent
    if not base.is_dir():
        raise MissingImageDataError(f"{path}: the pictures' root folder {base} not found")
    index, rows = _rows_parquet(path) if path.suffix.lower() in PARQUET_SUFFIXES else _rows_csv(path)
    guard = PathGuard(base)
    split_at = index.get("split")
    out: list[tuple[Path, str, str | None]] = []
    for where, row in rows:
        name, label = _cell(row[index["path"]]), _cell(row[index["label"]])
        if not name:
            raise ImageDataError(
                f"{path}: {where}: empty or missing path (expected a picture's path relative to {base})"
            )
        if not label:
            raise ImageDataError(f"{path}: {where}: empty or missing label for {quoted(name)}")
        split = None
        if split_at is not None and row[split_at] is not None:
            split = _cell(row[split_at])
            if split is None:
                raise ImageDataError(f"{path}: {where}: split must be text, got {quoted(repr(row[split_at]))}")
        file = guard(name, f"{path}: {where}: path")
        _check_listed_file(file, f"{path}: {where}")
        out.append((file, label, split or None))
    return out


def _check_listed_file(file: Path, where: str) -> None:
    """Refuse a listed path that exists but is no regular file (a FIFO would hang the worker that opens it, a
    device never ends); a missing one is left to the reader, whose error names it."""
    try:
        mode = os.stat(file).st_mode
    except (OSError, ValueError):
        return
    if not stat.S_ISREG(mode):
        raise ImageDataError(f"{where}: {file} is {file_kind(mode)}; expected a picture file")


def manifest_classes(labels: Iterable[str]) -> list[str]:
    """The class names of a manifest's labels: sorted, each once (label ``k`` is the ``k``-th)."""
    return sorted(set(labels))
