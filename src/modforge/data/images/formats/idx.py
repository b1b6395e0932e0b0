"""The IDX files of the MNIST family (MNIST, Fashion-MNIST, KMNIST, EMNIST), raw or gzip-compressed.

The IDX format (LeCun's, also called SN3 / "Pascal Vincent" by torchvision) is a 4-byte magic number —
two zero bytes, a type code (``0x08`` unsigned byte, ``0x09`` signed byte, ``0x0B`` short, ``0x0C`` int,
``0x0D`` float, ``0x0E`` double), the number of dimensions — then each dimension as a big-endian 32-bit
count, then the values, big-endian, in C order. :func:`read_idx` checks all of it (the data must be exactly
as long as the dimensions say) and returns a native-endian array.

The corpora are the four files ``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``,
``t10k-images-idx3-ubyte``, ``t10k-labels-idx1-ubyte`` (EMNIST: ``emnist-<split>-{train,test}-...``),
each raw or with ``.gz``. The arrays returned are exactly torchvision's ``.data`` and ``.targets``
(``uint8 [N, 28, 28]`` and ``int64 [N]``), and torchvision's folders (``root/MNIST/raw``...) are searched
too, so a corpus torchvision downloaded is used as it lies.
"""

from __future__ import annotations

import dataclasses
import gzip
import math
import os
import string
import struct
import zlib
from pathlib import Path
from typing import BinaryIO, Literal

import numpy as np

from ....core.safe_files import folder_below
from . import ImageDataError, MissingImageDataError, download_hint, missing_files_message

__all__ = [
    "EMNIST_CLASSES",
    "EMNIST_SPLITS",
    "FASHION_MNIST_CLASSES",
    "IDX_TYPES",
    "KMNIST_CLASSES",
    "IdxLayout",
    "MAX_IDX_BYTES",
    "MAX_IDX_DIMS",
    "MNIST_CLASSES",
    "MNIST_FAMILY_CLASSES",
    "MNIST_FILES",
    "IdxSplits",
    "emnist_files",
    "load_emnist",
    "load_mnist_family",
    "read_idx",
]

IDX_TYPES: dict[int, tuple[str, str]] = {
    0x08: (">u1", "unsigned byte"),
    0x09: (">i1", "signed byte"),
    0x0B: (">i2", "short"),
    0x0C: (">i4", "int"),
    0x0D: (">f4", "float"),
    0x0E: (">f8", "double"),
}
"""IDX type code → (big-endian numpy dtype, the spec's name)."""

MAX_IDX_BYTES = 2**30
"""Most bytes of values one IDX file may declare (EMNIST byclass's train images, the largest, are 547 MB)."""

DEFLATE_RATIO = 1032
"""Most bytes deflate can expand one compressed byte to: a gzip file of ``n`` bytes holds at most this
times ``n`` (a header declaring more is refused before anything is decompressed)."""

MAX_IDX_DIMS = 16
"""Most dimensions an IDX header may declare."""

MNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
"""The four official files of MNIST, Fashion-MNIST and KMNIST (each may also be ``<name>.gz``)."""

MNIST_CLASSES = ["0 - zero", "1 - one", "2 - two", "3 - three", "4 - four",
                 "5 - five", "6 - six", "7 - seven", "8 - eight", "9 - nine"]  # fmt: skip
"""torchvision's ``MNIST.classes``."""

FASHION_MNIST_CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                         "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]  # fmt: skip
"""torchvision's ``FashionMNIST.classes``."""

KMNIST_CLASSES = ["o", "ki", "su", "tsu", "na", "ha", "ma", "ya", "re", "wo"]
"""torchvision's ``KMNIST.classes`` (romanised Kuzushiji hiragana)."""

MNIST_FAMILY_CLASSES: dict[str, list[str]] = {
    "mnist": MNIST_CLASSES,
    "fashion_mnist": FASHION_MNIST_CLASSES,
    "kmnist": KMNIST_CLASSES,
}

_TORCHVISION_FOLDERS = {"mnist": "MNIST", "fashion_mnist": "FashionMNIST", "kmnist": "KMNIST", "emnist": "EMNIST"}

EMNIST_SPLITS = ("byclass", "bymerge", "balanced", "letters", "digits", "mnist")

_EMNIST_MERGED = set("cijklmopsuvwxyz")  # letters whose capital and small forms EMNIST merges
_EMNIST_ALL = set(string.digits + string.ascii_letters)
EMNIST_CLASSES: dict[str, list[str]] = {
    "byclass": sorted(_EMNIST_ALL),
    "bymerge": sorted(_EMNIST_ALL - _EMNIST_MERGED),
    "balanced": sorted(_EMNIST_ALL - _EMNIST_MERGED),
    "letters": ["N/A", *string.ascii_lowercase],
    "digits": list(string.digits),
    "mnist": list(string.digits),
}
"""torchvision's ``EMNIST.classes_split_dict`` (``letters`` labels run 1 … 26; label 0, ``"N/A"``, is unused)."""

IMAGE_SHAPE = (28, 28)


@dataclasses.dataclass
class IdxSplits:
    """A corpus of the MNIST family as arrays.

    Attributes:
        train_images: ``uint8 [N, 28, 28]``.
        train_labels: ``int64 [N]``.
        test_images: ``uint8 [M, 28, 28]``.
        test_labels: ``int64 [M]``.
        folder: the folder the files were read from.
        class_names: the name of each label (torchvision's ``classes``).
    """

    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray
    folder: Path
    class_names: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class IdxLayout:
    """What a corpus expects an IDX file to hold, checked on the header before any value is read (a
    compressed file is not decompressed past its header when it declares anything else).

    Attributes:
        type_code: the IDX type code (see :data:`IDX_TYPES`; ``0x08``: unsigned bytes).
        shape: each dimension's length; None where any length will do (the number of samples).
        described: the expectation in words, for the error (``"mnist images as unsigned bytes [N, 28, 28]"``).
    """

    type_code: int
    shape: tuple[int | None, ...]
    described: str

    def fits(self, code: int, dims: tuple[int, ...]) -> bool:
        """Whether a header declaring type ``code`` and dimensions ``dims`` is what is expected."""
        return code == self.type_code and len(dims) == len(self.shape) and all(
            want is None or want == got for want, got in zip(self.shape, dims, strict=True))  # fmt: skip


# ----------------------------------------------------------------------------- one file
def read_idx(path: str | os.PathLike, layout: IdxLayout | None = None) -> np.ndarray:
    """The array an IDX file holds (raw, or gzip-compressed: recognised by its content, not its name),
    in native byte order.

    The header is read and checked first — against ``layout`` when given, and against
    :data:`MAX_IDX_BYTES` — then exactly the bytes it declares are read, streamed from the
    decompressor (a compressed file is never inflated whole, nor past what its header declares).

    Raises:
        MissingImageDataError: no such file.
        ImageDataError: not an IDX file (magic number, type code, dimension count), not of ``layout``,
            more than :data:`MAX_IDX_BYTES` bytes of values, data shorter or longer than the header declares, a
            damaged gzip stream; the message names the file.
    """
    path = Path(path)
    if not path.exists():
        raise MissingImageDataError(f"IDX file not found: {path}")
    if not path.is_file():
        raise ImageDataError(f"{path} is not a regular file (expected an IDX file)")
    compressed = False
    try:
        with open(path, "rb") as raw:
            compressed = raw.read(2) == b"\x1f\x8b"
            raw.seek(0)
            size = os.fstat(raw.fileno()).st_size
            if compressed:
                with gzip.GzipFile(fileobj=raw, mode="rb") as stream:
                    return _read_idx_stream(stream, path, layout, compressed_size=size)
            return _read_idx_stream(raw, path, layout, size=size)
    except MemoryError:
        raise ImageDataError(f"{path}: not enough memory to hold the values its IDX header declares") from None
    except (OSError, EOFError, zlib.error) as exc:
        kind = "gzip-compressed IDX file" if compressed else "IDX file"
        reason = "it ends early" if isinstance(exc, EOFError) else str(exc)[:200] or type(exc).__name__
        raise ImageDataError(f"{path}: not a readable {kind} ({reason})") from None


def _read_header(stream: BinaryIO, path: Path) -> tuple[int, tuple[int, ...]]:
    """The type code and dimensions of an IDX header (magic number, type and dimension count checked)."""
    magic = _read_bytes(stream, 4)
    if len(magic) < 4 or magic[0] or magic[1]:
        raise ImageDataError(f"{path}: not an IDX file (expected a header of two zero bytes, a type code and a "
                             f"dimension count; the file starts with {magic.hex() or 'nothing'})")  # fmt: skip
    code, ndim = magic[2], magic[3]
    if code not in IDX_TYPES:
        known = ", ".join(f"0x{c:02X} ({name})" for c, (_, name) in IDX_TYPES.items())
        raise ImageDataError(f"{path}: IDX type code 0x{code:02X} is not one of {known}")
    if not 1 <= ndim <= MAX_IDX_DIMS:
        raise ImageDataError(f"{path}: the IDX header declares {ndim} dimensions (expected 1 … {MAX_IDX_DIMS})")
    raw_dims = _read_bytes(stream, 4 * ndim)
    if len(raw_dims) < 4 * ndim:
        raise ImageDataError(f"{path}: truncated IDX header (it declares {ndim} dimensions, the file ends "
                             f"after {len(raw_dims) // 4})")  # fmt: skip
    return code, struct.unpack(f">{ndim}I", raw_dims)


def _read_idx_stream(stream: BinaryIO, path: Path, layout: IdxLayout | None, *, size: int | None = None,
                     compressed_size: int | None = None) -> np.ndarray:  # fmt: skip
    """Parse an IDX stream: the header, checked, then exactly the values it declares. ``size`` is the
    file's length when it is not compressed, ``compressed_size`` when it is (both checked up front)."""
    code, dims = _read_header(stream, path)
    dtype_code, type_name = IDX_TYPES[code]
    shape = " × ".join(str(d) for d in dims)
    if layout is not None and not layout.fits(code, dims):
        raise ImageDataError(f"{path}: expected {layout.described}, got {type_name} values "
                             f"[{', '.join(map(str, dims))}]")  # fmt: skip
    count = math.prod(dims)
    dtype = np.dtype(dtype_code)
    nbytes = count * dtype.itemsize
    if nbytes > MAX_IDX_BYTES:
        raise ImageDataError(f"{path}: the IDX header declares {shape} = {count} {type_name} values ({nbytes} "
                             f"bytes), more than the {MAX_IDX_BYTES} bytes allowed")  # fmt: skip
    header = 4 + 4 * len(dims)
    declared = f"its header declares {shape} {type_name} values ({nbytes} bytes after the {header}-byte header)"
    if size is not None and size != header + nbytes:
        held = size - header
        problem = "truncated IDX file" if held < nbytes else "IDX file longer than its header says"
        raise ImageDataError(f"{path}: {problem}: {declared}, the file holds {held}")
    if compressed_size is not None and header + nbytes > DEFLATE_RATIO * compressed_size:
        raise ImageDataError(f"{path}: truncated IDX file: {declared}, more than a gzip file of "
                             f"{compressed_size} bytes can hold")  # fmt: skip
    values = np.empty(count, dtype=dtype)
    got = _read_into(stream, memoryview(values.view(np.uint8)))
    if got < nbytes:
        raise ImageDataError(f"{path}: truncated IDX file: {declared}, the data holds {got}")
    if stream.read(1):
        raise ImageDataError(f"{path}: IDX file longer than its header says: {declared}, more data follows")
    return values.reshape(dims).astype(dtype.newbyteorder("="), copy=False)


def _read_bytes(stream: BinaryIO, n: int) -> bytes:
    """Up to ``n`` bytes (fewer only at the end of the stream)."""
    parts, got = [], 0
    while got < n:
        chunk = stream.read(n - got)
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def _read_into(stream: BinaryIO, view: memoryview) -> int:
    """Fill ``view`` from ``stream``; the number of bytes read (less than its size only at the end)."""
    got = 0
    while got < len(view):
        n = stream.readinto(view[got:])
        if not n:
            break
        got += n
    return got


# ----------------------------------------------------------------------------- a corpus
def _pick(folder: Path, name: str) -> Path | None:
    """``folder/name`` (preferred) or ``folder/name.gz``, whichever is a file; None when neither is."""
    for candidate in (folder / name, folder / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    return None


def _find_files(names: tuple[str, ...], below: tuple[str, ...], corpus: str, root: Path, what: str) -> dict[str, Path]:
    """The first folder holding every one of ``names`` (raw or .gz): name → file. The folders are ``root``,
    then each of ``below`` under it — each looked into only when the ones before lack a file, and only when
    it resolves inside ``root``'s real path (:func:`~modforge.core.safe_files.folder_below`: a ``MNIST/raw``
    planted as a link to someone's folder is refused, not read)."""
    folders = [root, *(root / name for name in below)]
    partial: tuple[Path, list[str]] | None = None
    for k, folder in enumerate(folders):
        if k:  # below root: looked into only when it resolves inside the root
            folder_below(root, below[k - 1], f"{corpus}: {below[k - 1]} folder")
        found = {name: _pick(folder, name) for name in names}
        if all(found.values()):
            return {name: file for name, file in found.items() if file is not None}
        if partial is None and any(found.values()):
            partial = (folder, [name for name, file in found.items() if file is None])
    if partial is not None:
        folder, missing = partial
        raise MissingImageDataError(f"{what} files missing in {folder}: expected {', '.join(missing)} "
                                    f"(raw or .gz) there too, next to the others; "
                                    f"{download_hint(corpus, root)}")  # fmt: skip
    raise MissingImageDataError(missing_files_message(f"{what} files", names, folders, corpus, root, "each raw or .gz"))


def _labelled(images_file: Path, labels_file: Path, classes: list[str], what: str) -> tuple[np.ndarray, np.ndarray]:
    """Images and labels of one split, checked: uint8 ``[N, 28, 28]``, uint8 ``[N]``, labels in range. Each
    header is checked before its values are read; the labels' must declare one label per image."""
    images = read_idx(images_file, IdxLayout(0x08, (None, *IMAGE_SHAPE),
                                             f"{what} images as unsigned bytes [N, 28, 28] (an idx3-ubyte file)"))  # fmt: skip
    labels = read_idx(labels_file, IdxLayout(0x08, (len(images),), f"{what} labels as unsigned bytes "
                                             f"[{len(images)}] (an idx1-ubyte file: one label for each of the "
                                             f"{len(images)} images in {images_file.name})"))  # fmt: skip
    bad = np.flatnonzero(labels >= len(classes))
    if bad.size:
        raise ImageDataError(f"{labels_file}: label {int(labels[bad[0]])} at position {int(bad[0])} is out of range "
                             f"(expected 0 … {len(classes) - 1}: the {len(classes)} classes of {what})")  # fmt: skip
    return images, labels.astype(np.int64)


def load_mnist_family(root: str | os.PathLike, corpus: Literal["mnist", "fashion_mnist", "kmnist"]) -> IdxSplits:
    """MNIST, Fashion-MNIST or KMNIST from its four IDX files (see :data:`MNIST_FILES`; raw preferred over
    ``.gz`` when both lie there), looked for in ``root`` and in torchvision's ``root/MNIST/raw``,
    ``root/FashionMNIST/raw``, ``root/KMNIST/raw`` (each only when it resolves inside ``root``).

    Raises:
        UnsafePathError: a folder below ``root`` that leads out of it through a link.
        MissingImageDataError: the files are not there (the message names them, the folders and the
            download command).
        ImageDataError: a damaged file, image and label counts that disagree, a label out of range.
    """
    if corpus not in MNIST_FAMILY_CLASSES:
        raise ImageDataError(f"unknown corpus {corpus!r}: expected one of {', '.join(MNIST_FAMILY_CLASSES)}")
    root = Path(root)
    files = _find_files(MNIST_FILES, (f"{_TORCHVISION_FOLDERS[corpus]}/raw",), corpus, root, corpus)
    classes = MNIST_FAMILY_CLASSES[corpus]
    train_images, train_labels = _labelled(files[MNIST_FILES[0]], files[MNIST_FILES[1]], classes, corpus)
    test_images, test_labels = _labelled(files[MNIST_FILES[2]], files[MNIST_FILES[3]], classes, corpus)
    return IdxSplits(train_images, train_labels, test_images, test_labels, files[MNIST_FILES[0]].parent, list(classes))


def emnist_files(split: str) -> tuple[str, str, str, str]:
    """The four official file names of an EMNIST split (train images, train labels, test images, test labels)."""
    return tuple(f"emnist-{split}-{part}-{kind}-ubyte"  # type: ignore[return-value]
                 for part in ("train", "test") for kind in ("images-idx3", "labels-idx1"))  # fmt: skip


def load_emnist(
    root: str | os.PathLike, split: Literal["byclass", "bymerge", "balanced", "letters", "digits", "mnist"]
) -> IdxSplits:
    """An EMNIST split from its IDX files (:func:`emnist_files`, raw or ``.gz``), looked for in ``root``,
    ``root/gzip`` (where the official ``gzip.zip`` extracts) and torchvision's ``root/EMNIST/raw`` (each only
    when it resolves inside ``root``).

    The images are returned as the files store them — and as ``torchvision.datasets.EMNIST`` gives them:
    **transposed** (each picture is the character mirrored across its main diagonal; ``images.transpose(0, 2,
    1)`` shows it upright). Labels follow :data:`EMNIST_CLASSES` (``letters``: 1 … 26).

    Raises:
        MissingImageDataError, ImageDataError, UnsafePathError: as :func:`load_mnist_family`.
    """
    if split not in EMNIST_CLASSES:
        raise ImageDataError(f"unknown EMNIST split {split!r}: expected one of {', '.join(EMNIST_SPLITS)}")
    root = Path(root)
    names = emnist_files(split)
    files = _find_files(names, ("gzip", "EMNIST/raw"), "emnist", root, f"EMNIST {split}")
    classes = EMNIST_CLASSES[split]
    what = f"EMNIST {split}"
    train_images, train_labels = _labelled(files[names[0]], files[names[1]], classes, what)
    test_images, test_labels = _labelled(files[names[2]], files[names[3]], classes, what)
    return IdxSplits(train_images, train_labels, test_images, test_labels, files[names[0]].parent, list(classes))
