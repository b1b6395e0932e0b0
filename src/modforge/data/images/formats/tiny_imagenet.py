"""Tiny-ImageNet-200 as its official archive extracts: which picture files, with which labels.

The folder ``tiny-imagenet-200`` holds ``wnids.txt`` (the 200 WordNet ids, one a line), ``words.txt``
(``<wnid>\\t<synonym>, <synonym>...`` for all of WordNet), ``train/<wnid>/images/*.JPEG`` (500 a class),
``val/images/*.JPEG`` with ``val/val_annotations.txt`` (``file\\twnid\\tx0\\ty0\\tx1\\ty1`` a line) and an unlabelled
``test/``. Label ``k`` is the ``k``-th id of ``wnids.txt`` — the convention of most papers and loaders
(torchvision has no Tiny-ImageNet class).

The files are someone else's: a ``tiny-imagenet-200`` folder under ``root`` must resolve inside ``root``
(:func:`~modforge.core.safe_files.folder_below`: a link there to someone's folder is refused), the folder is
checked once for links leading out of it (:func:`~modforge.core.safe_files.check_folder`), and every file
name read from ``val_annotations.txt`` must stay inside ``val/images`` (:func:`~modforge.core.safe_files.inside`).
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

from ....core.safe_files import UnsafePathError, check_folder, folder_below, inside
from . import ImageDataError, ImagePathError, MissingImageDataError, download_hint
from .listing import IMG_EXTENSIONS

__all__ = ["TINY_IMAGENET_FILES", "TinyImageNetListing", "list_tiny_imagenet"]

FOLDER = "tiny-imagenet-200"
TINY_IMAGENET_FILES = ("wnids.txt", "words.txt", "train/<wnid>/images/", "val/val_annotations.txt", "val/images/")
"""What the folder must hold (the test split is not read: it has no labels)."""

_WNID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]*")


@dataclasses.dataclass
class TinyImageNetListing:
    """The labelled pictures of Tiny-ImageNet.

    Attributes:
        train: ``(file, label)`` — classes in ``wnids.txt`` order, files sorted by name within a class.
        val: ``(file, label)`` — sorted by file name.
        wnids: the WordNet id of each label.
        class_names: the first synonym ``words.txt`` gives for each id (the id when it gives none).
        folder: the ``tiny-imagenet-200`` folder read.
    """

    train: list[tuple[Path, int]]
    val: list[tuple[Path, int]]
    wnids: list[str]
    class_names: list[str]
    folder: Path


def _lines(path: Path) -> list[str]:
    try:
        return path.read_bytes().decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise ImageDataError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise ImageDataError(f"{path}: cannot be read ({exc.strerror or exc})") from None


def _read_wnids(path: Path) -> list[str]:
    wnids: list[str] = []
    for n, line in enumerate(_lines(path), 1):
        wnid = line.strip()
        if not wnid:
            continue
        if not _WNID.fullmatch(wnid) or wnid == "..":
            raise ImageDataError(f"{path}: line {n}: {wnid[:60]!r} is not a WordNet id (expected e.g. n01443537)")
        if wnid in wnids:
            raise ImageDataError(f"{path}: line {n}: {wnid} is listed twice")
        wnids.append(wnid)
    if not wnids:
        raise ImageDataError(f"{path}: no WordNet id (expected one a line, 200 for Tiny-ImageNet-200)")
    return wnids


def _read_words(path: Path, wnids: list[str]) -> list[str]:
    wanted, names = set(wnids), {}
    for n, line in enumerate(_lines(path), 1):
        if not line.strip():
            continue
        key, tab, synonyms = line.partition("\t")
        if not tab:
            raise ImageDataError(f"{path}: line {n}: expected '<wnid>\\t<names>' (tab-separated), got {line[:60]!r}")
        key = key.strip()
        if key in wanted:
            names[key] = synonyms.split(",")[0].strip() or key
    return [names.get(w, w) for w in wnids]


def _pictures(folder: Path) -> list[str]:
    try:
        entries = list(os.scandir(folder))
    except OSError as exc:
        raise ImageDataError(f"cannot read the folder {folder} ({exc.strerror or exc})") from None
    return sorted(e.name for e in entries if e.name.lower().endswith(IMG_EXTENSIONS) and e.is_file())


def _read_val(path: Path, images: Path, label_of: dict[str, int]) -> list[tuple[Path, int]]:
    val: list[tuple[Path, int]] = []
    for n, line in enumerate(_lines(path), 1):
        if not line.strip():
            continue
        fields = line.rstrip("\r\n").split("\t")
        if len(fields) != 6 or not all(re.fullmatch(r"-?\d+", f.strip()) for f in fields[2:]):
            raise ImageDataError(f"{path}: line {n}: expected 6 tab-separated fields (file, wnid, x0, y0, x1, y1), "
                                 f"got {line[:80]!r}")  # fmt: skip
        name, wnid = fields[0].strip(), fields[1].strip()
        if wnid not in label_of:
            raise ImageDataError(f"{path}: line {n}: {wnid[:60]!r} is not one of the ids in wnids.txt")
        try:
            file = inside(images, name, f"{path}: line {n}: file name")
        except UnsafePathError as exc:
            raise ImagePathError(str(exc)) from None
        if not file.is_file():
            raise MissingImageDataError(f"{path}: line {n}: the picture {file} is missing")
        val.append((file, label_of[wnid]))
    if not val:
        raise ImageDataError(f"{path}: lists no picture (expected a line file\\twnid\\tx0\\ty0\\tx1\\ty1 per picture)")
    val.sort(key=lambda item: str(item[0]))
    return val


def list_tiny_imagenet(root: str | os.PathLike) -> TinyImageNetListing:
    """The train and val pictures of Tiny-ImageNet-200 under ``root`` (``root/tiny-imagenet-200``, or ``root``
    itself when it holds ``wnids.txt``), with their labels and class names.

    Raises:
        MissingImageDataError: the folder or one of its files missing (the message lists what is expected
            and the download command).
        ImageDataError: a malformed line (naming file and line), a class without pictures.
        ImagePathError: a link leading out of the folder, a file name in ``val_annotations.txt`` leaving
            ``val/images``.
    """
    root = Path(root)
    try:
        # root may be a link the user named; the tiny-imagenet-200 folder below it may not lead out of it
        folder = root if (root / "wnids.txt").is_file() else folder_below(root, FOLDER, "tiny_imagenet")
        if (folder / "wnids.txt").is_file():
            check_folder(folder, what="Tiny-ImageNet folder")
    except UnsafePathError as exc:
        raise ImagePathError(str(exc)) from None
    if not (folder / "wnids.txt").is_file():
        raise MissingImageDataError(f"Tiny-ImageNet files not found: expected {', '.join(TINY_IMAGENET_FILES)} in "
                                    f"{root / FOLDER} (or in {root}); {download_hint('tiny_imagenet', root)}")  # fmt: skip
    needed = {"words.txt": (folder / "words.txt").is_file(), "train/": (folder / "train").is_dir(),
              "val/val_annotations.txt": (folder / "val" / "val_annotations.txt").is_file(),
              "val/images/": (folder / "val" / "images").is_dir()}  # fmt: skip
    missing = [name for name, there in needed.items() if not there]
    if missing:
        raise MissingImageDataError(f"Tiny-ImageNet files missing in {folder}: expected {', '.join(missing)} there "
                                    f"too; {download_hint('tiny_imagenet', root)}")  # fmt: skip
    wnids = _read_wnids(folder / "wnids.txt")
    class_names = _read_words(folder / "words.txt", wnids)
    train: list[tuple[Path, int]] = []
    for label, wnid in enumerate(wnids):
        images = folder / "train" / wnid / "images"
        if not images.is_dir():
            raise MissingImageDataError(f"Tiny-ImageNet: {images} not found (every id of wnids.txt has a folder "
                                        f"train/<wnid>/images); {download_hint('tiny_imagenet', root)}")  # fmt: skip
        names = _pictures(images)
        if not names:
            raise ImageDataError(f"Tiny-ImageNet: no picture in {images} (expected files ending in "
                                 f"{', '.join(IMG_EXTENSIONS)})")  # fmt: skip
        train.extend((images / name, label) for name in names)
    label_of = {wnid: k for k, wnid in enumerate(wnids)}
    val = _read_val(folder / "val" / "val_annotations.txt", folder / "val" / "images", label_of)
    return TinyImageNetListing(train, val, wnids, class_names, folder)
