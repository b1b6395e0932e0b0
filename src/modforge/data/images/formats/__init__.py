"""Readers of the official on-disk formats of standard image corpora: pure functions returning numpy
arrays and lists of files, with no torch ``Dataset`` (those are built on top) and no torchvision import.

One module per format:

* :mod:`.idx` — the IDX files of MNIST, Fashion-MNIST, KMNIST and EMNIST (raw or ``.gz``);
* :mod:`.cifar` — CIFAR-10/100, the "python" batches (read with a restricted unpickler) or the binary ones;
* :mod:`.tiny_imagenet` — the Tiny-ImageNet-200 folder tree (file lists and labels);
* :mod:`.listing` — a folder of class sub-folders (as torchvision's ``ImageFolder``) and CSV/parquet manifests.

Every problem with the files — missing, truncated, corrupt, a path leading out of the data folder, a pickle
asking to run code — is one :class:`ImageDataError` (a :class:`~modforge.core.errors.UsageError`, so the
command line prints one line) naming the file, what was wrong and what was expected. A missing corpus
says which official files belong in which folder and how ``modforge data download`` fetches them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

from ....core.errors import UsageError
from ....core.safe_files import UnsafePathError

__all__ = [
    "CORPORA",
    "ImageDataError",
    "ImagePathError",
    "MissingImageDataError",
    "download_hint",
    "missing_files_message",
]

CORPORA = ("mnist", "fashion_mnist", "kmnist", "emnist", "cifar10", "cifar100", "tiny_imagenet")
"""The corpora ``modforge data download NAME --root ROOT`` fetches."""


class ImageDataError(UsageError):
    """Files of an image corpus, a picture folder or a manifest that cannot be used; the message names the
    file (or folder), what was wrong and what was expected."""


class MissingImageDataError(ImageDataError):
    """A corpus' folder or some of its official files are missing (the message lists them and the folder)."""


class ImagePathError(ImageDataError, UnsafePathError):
    """A path from the data (a manifest row, an annotation file, a link) leading outside the data folder."""


def download_hint(corpus: str, root: str | os.PathLike) -> str:
    """``"`modforge data download CORPUS --root ROOT` fetches them"``: the end of a missing-files message."""
    return f"`modforge data download {corpus} --root {os.fspath(root)}` fetches them"


def missing_files_message(
    what: str,
    missing: Iterable[str],
    folders: Sequence[str | os.PathLike],
    corpus: str,
    root: str | os.PathLike,
    note: str = "",
) -> str:
    """One line: ``what`` is missing — the expected official files, the folder(s) they belong in, and the
    download command. ``note`` (e.g. "each raw or .gz") is added after the file names."""
    names = ", ".join(missing)
    places = " or ".join(os.fspath(f) for f in folders)
    extra = f" ({note})" if note else ""
    return f"{what} not found: expected {names}{extra} in {places}; {download_hint(corpus, root)}"
