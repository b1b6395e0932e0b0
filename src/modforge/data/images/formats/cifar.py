"""CIFAR-10 and CIFAR-100 from their official files: the "python" version (pickled batches) or the binary one.

Layouts (as the official archives extract):

* CIFAR-10 python: ``cifar-10-batches-py/{data_batch_1 … data_batch_5, test_batch, batches.meta}``;
* CIFAR-100 python: ``cifar-100-python/{train, test, meta}``;
* CIFAR-10 binary: ``cifar-10-batches-bin/{data_batch_1.bin … data_batch_5.bin, test_batch.bin,
  batches.meta.txt}`` — records of 1 label byte + 3,072 pixel bytes;
* CIFAR-100 binary: ``cifar-100-binary/{train.bin, test.bin, fine_label_names.txt, coarse_label_names.txt}``
  — records of a coarse label byte, a fine label byte + 3,072 pixel bytes.

Pixels are stored as three 32 × 32 planes (R, G, B); they are returned ``uint8 [N, 32, 32, 3]`` (HWC), the
same array as torchvision's ``CIFAR10(...).data``, with ``int64`` labels equal to its ``.targets``.

The python batches are pickles, and unpickling runs whatever code a pickle names. They are read with
:class:`RestrictedUnpickler`, which admits only the few numpy names an array needs and builds the arrays
itself (numpy never sees the pickle's data); anything else — ``os.system``, ``builtins.eval``... — is
refused before it is called, with an :class:`~.ImageDataError` naming the file and the refused name.
"""

from __future__ import annotations

import dataclasses
import io
import os
import pickle
import re
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ....core.restricted_pickle import SharedWalk
from ....core.safe_files import folder_below
from . import ImageDataError, MissingImageDataError, download_hint

__all__ = [
    "CIFAR_LAYOUTS",
    "MAX_PICKLE_BYTES",
    "CifarLayout",
    "CifarSplits",
    "RestrictedUnpickler",
    "load_cifar",
    "read_cifar_binary",
    "read_cifar_pickle",
]

Corpus = Literal["cifar10", "cifar100"]

PIXELS = 3 * 32 * 32
MAX_PICKLE_BYTES = 1024**3
"""Largest python batch read (CIFAR-100's ``train``, the largest, is 158 MB)."""


@dataclasses.dataclass(frozen=True)
class CifarLayout:
    """The official files of one version of one corpus."""

    folder: str
    train: tuple[str, ...]
    test: tuple[str, ...]
    meta: tuple[str, ...]
    classes: int


CIFAR_LAYOUTS: dict[tuple[str, str], CifarLayout] = {
    ("cifar10", "python"): CifarLayout("cifar-10-batches-py", tuple(f"data_batch_{i}" for i in range(1, 6)),
                                       ("test_batch",), ("batches.meta",), 10),
    ("cifar100", "python"): CifarLayout("cifar-100-python", ("train",), ("test",), ("meta",), 100),
    ("cifar10", "binary"): CifarLayout("cifar-10-batches-bin", tuple(f"data_batch_{i}.bin" for i in range(1, 6)),
                                       ("test_batch.bin",), ("batches.meta.txt",), 10),
    ("cifar100", "binary"): CifarLayout("cifar-100-binary", ("train.bin",), ("test.bin",),
                                        ("fine_label_names.txt", "coarse_label_names.txt"), 100),
}  # fmt: skip
"""(corpus, version) → its folder, files and class count."""

COARSE_CLASSES = 20
_NAMES = {"cifar10": "CIFAR-10", "cifar100": "CIFAR-100"}


@dataclasses.dataclass
class CifarSplits:
    """CIFAR as arrays.

    Attributes:
        train_images: ``uint8 [50000, 32, 32, 3]`` (HWC, RGB).
        train_labels: ``int64 [50000]`` (CIFAR-100: the fine labels).
        test_images: ``uint8 [10000, 32, 32, 3]``.
        test_labels: ``int64 [10000]``.
        class_names: the name of each label (CIFAR-100: the 100 fine classes).
        folder: the folder the files were read from.
        coarse_train_labels, coarse_test_labels: CIFAR-100's 20 superclasses (``int64``); None for CIFAR-10.
        coarse_names: the names of the superclasses; None for CIFAR-10.
    """

    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray
    class_names: list[str]
    folder: Path
    coarse_train_labels: np.ndarray | None = None
    coarse_test_labels: np.ndarray | None = None
    coarse_names: list[str] | None = None


# ----------------------------------------------------------------------------- the restricted unpickler
class _Refused(Exception):
    """Raised inside the unpickler; turned into an ImageDataError naming the file."""


class _NdarrayType:
    """What the name ``numpy.ndarray`` stands for while unpickling: a marker, not callable."""


_NDARRAY = _NdarrayType()
_DTYPE_TEXT = re.compile(r"[|<>=]?[biuf][1248]")


class _DtypeSpec:
    """What ``numpy.dtype(...)`` builds while unpickling: a plain number type (bool, integers, floats),
    checked; the real ``numpy.dtype`` is made from it, never from the pickle's state directly."""

    def __init__(self, code: Any, align: Any = False, copy: Any = False):
        text = code.decode("latin1") if isinstance(code, bytes) else code
        if not isinstance(text, str) or not _DTYPE_TEXT.fullmatch(text):
            raise _Refused(f"an array of type {str(code)[:40]!r} (only plain numbers are expected)")
        self.dtype = np.dtype(text)

    def __setstate__(self, state: Any) -> None:
        if not isinstance(state, tuple) or len(state) < 2:
            raise _Refused("a malformed dtype")
        endian = state[1].decode("latin1") if isinstance(state[1], bytes) else state[1]
        if endian not in ("<", ">", "|", "="):
            raise _Refused(f"a dtype byte order {str(endian)[:10]!r}")
        if any(part is not None for part in state[2:5]):  # subarray, names, fields: never in CIFAR
            raise _Refused("a structured dtype")
        if endian in "<>":
            self.dtype = self.dtype.newbyteorder(endian)


class _ArraySpec:
    """What ``numpy.core.multiarray._reconstruct`` builds while unpickling; its state becomes a numpy
    array in :meth:`__setstate__` (sizes checked, data copied from the pickle's bytes)."""

    array: np.ndarray | None = None

    def __setstate__(self, state: Any) -> None:
        if not isinstance(state, tuple) or len(state) not in (4, 5):
            raise _Refused("a malformed array")
        shape, spec, fortran, raw = state[-4:]
        if not (isinstance(shape, tuple) and all(isinstance(d, int) and d >= 0 for d in shape)):
            raise _Refused(f"an array of shape {str(shape)[:40]}")
        if not isinstance(spec, _DtypeSpec):
            raise _Refused("an array without a plain dtype")
        if isinstance(raw, str):  # a Python 2 pickle read with encoding="latin1"
            raw = raw.encode("latin1")
        if not isinstance(raw, (bytes, bytearray)):
            raise _Refused("an array whose data are not bytes")
        self.array = _array_from(raw, spec.dtype, shape, "F" if fortran else "C")


def _array_from(raw: Any, dtype: np.dtype, shape: Sequence[int], order: str) -> np.ndarray:
    count = 1
    for d in shape:
        count *= d
    if count * dtype.itemsize != len(memoryview(raw).cast("B")):
        raise _Refused(f"an array of {count} values whose data hold {len(memoryview(raw).cast('B'))} bytes")
    return np.frombuffer(raw, dtype=dtype, count=count).reshape(shape, order=order)  # read-only, no copy


def _reconstruct(subtype: Any, shape: Any, code: Any) -> _ArraySpec:
    if subtype is not _NDARRAY or tuple(shape) != (0,):
        raise _Refused("numpy's _reconstruct called with other arguments than an array's pickle has")
    return _ArraySpec()


def _frombuffer(buffer: Any, spec: Any, shape: Any, order: Any) -> np.ndarray:
    """numpy's protocol-5 form of an array (``numpy._core.numeric._frombuffer``)."""
    if not isinstance(spec, _DtypeSpec) or not isinstance(buffer, (bytes, bytearray, pickle.PickleBuffer)):
        raise _Refused("numpy's _frombuffer called with other arguments than an array's pickle has")
    if not (isinstance(shape, tuple) and all(isinstance(d, int) and d >= 0 for d in shape)):
        raise _Refused(f"an array of shape {str(shape)[:40]}")
    return _array_from(buffer, spec.dtype, shape, "F" if order == "F" else "C")


_ALLOWED: dict[tuple[str, str], Any] = {
    ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy.core.numeric", "_frombuffer"): _frombuffer,
    ("numpy._core.numeric", "_frombuffer"): _frombuffer,
    ("numpy", "ndarray"): _NDARRAY,
    ("numpy", "dtype"): _DtypeSpec,
}


class RestrictedUnpickler(pickle.Unpickler):
    """An unpickler for data pickles that holds plain containers, strings, numbers and numpy arrays of plain
    numbers, and nothing else.

    ``find_class`` admits only ``numpy.core.multiarray._reconstruct`` (or ``numpy._core...``),
    ``numpy.ndarray``, ``numpy.dtype`` (and protocol 5's ``numpy._core.numeric._frombuffer``), and maps them
    to stand-ins that check their arguments and build the array with ``numpy.frombuffer``; every other name
    raises before anything is called. Python 2 strings are read as ``latin1`` (as torchvision reads CIFAR).
    """

    def __init__(self, file: io.BufferedIOBase):
        super().__init__(file, encoding="latin1")

    def find_class(self, module: str, name: str) -> Any:
        allowed = _ALLOWED.get((module, name))
        if allowed is None:
            raise _Refused(f"the global {module}.{name}"[:200])
        return allowed

    def persistent_load(self, pid: Any) -> Any:
        raise _Refused("a persistent id")


def _unwrap(value: Any, walk: SharedWalk, depth: int = 0) -> Any:
    """The unpickled object with every array stand-in replaced by its numpy array (containers five deep
    converted, what lies deeper left as it is). Each shared container is converted once per depth
    (:class:`~modforge.core.restricted_pickle.SharedWalk`), within its node budget."""
    if isinstance(value, _ArraySpec):
        if value.array is None:
            raise _Refused("an array without data")
        return value.array
    if isinstance(value, (_DtypeSpec, _NdarrayType)):
        return value.dtype if isinstance(value, _DtypeSpec) else value
    if depth > 4 or not isinstance(value, (dict, list, tuple)):
        return value
    return walk.once(value, lambda: _unwrap_items(value, walk, depth), key=(id(value), depth))


def _unwrap_items(value: dict | list | tuple, walk: SharedWalk, depth: int) -> Any:
    if isinstance(value, dict):
        return {k: _unwrap(v, walk, depth + 1) for k, v in value.items()}
    items = [_unwrap(v, walk, depth + 1) for v in value]
    return items if isinstance(value, list) else tuple(items)


def read_cifar_pickle(path: str | os.PathLike) -> dict[str, Any]:
    """A CIFAR python batch (or meta file): a dict with ``str`` keys (``bytes`` keys are decoded), read with
    :class:`RestrictedUnpickler`. Its numpy arrays are read-only views of the pickle's bytes.

    Raises:
        MissingImageDataError: no such file.
        ImageDataError: not a pickle, a damaged one, one naming anything but numpy's array pieces (nothing in
            it is run), not a dict; the message names the file.
    """
    path = Path(path)
    if not path.is_file():
        raise MissingImageDataError(f"CIFAR batch not found: {path}")
    size = path.stat().st_size
    if size > MAX_PICKLE_BYTES:
        raise ImageDataError(f"{path}: {size} bytes, more than the {MAX_PICKLE_BYTES} a CIFAR batch may have")
    try:
        # read first, then unpickle from memory: a length field claiming gigabytes cannot make the unpickler
        # allocate them, it finds the data short
        data = path.read_bytes()
        loaded = _unwrap(RestrictedUnpickler(io.BytesIO(data)).load(), SharedWalk(_Refused))
    except _Refused as exc:
        raise ImageDataError(f"{path}: refused to unpickle {exc}: a CIFAR batch holds only numpy arrays, lists, "
                             "strings and numbers (nothing in the file was run)") from None  # fmt: skip
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, KeyError, IndexError, AttributeError,
            OverflowError, MemoryError, RecursionError, struct.error, UnicodeError, OSError) as exc:  # fmt: skip
        raise ImageDataError(f"{path}: not a readable CIFAR python batch (a pickle): "
                             f"{type(exc).__name__}: {str(exc)[:200]}") from None  # fmt: skip
    if not isinstance(loaded, dict):
        raise ImageDataError(f"{path}: expected a pickled dict (a CIFAR python batch), got {type(loaded).__name__}")
    return {k.decode("latin1") if isinstance(k, bytes) else k: v for k, v in loaded.items()}


# ----------------------------------------------------------------------------- reading the versions
def _field(entry: dict[str, Any], keys: Sequence[str], path: Path) -> Any:
    for key in keys:
        if key in entry:
            return entry[key]
    found = ", ".join(sorted(str(k) for k in entry))[:200]
    raise ImageDataError(f"{path}: no {' or '.join(repr(k) for k in keys)} entry (found: {found})")


def _labels(values: Any, count: int, classes: int, what: str, path: Path) -> np.ndarray:
    """``values`` as ``int64 [count]``, each in ``0 … classes - 1``."""
    if isinstance(values, np.ndarray):
        ok = values.ndim == 1 and values.dtype.kind in "iu"
    else:
        ok = isinstance(values, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in values)
    if not ok:
        raise ImageDataError(f"{path}: {what} must be a list of integers, got {type(values).__name__}")
    labels = np.asarray(values, dtype=np.int64)
    if len(labels) != count:
        raise ImageDataError(f"{path}: {count} images but {len(labels)} {what}; they must agree (one per image)")
    bad = np.flatnonzero((labels < 0) | (labels >= classes))
    if bad.size:
        raise ImageDataError(f"{path}: {what}: {int(labels[bad[0]])} at position {int(bad[0])} is out of range "
                             f"(expected 0 … {classes - 1})")  # fmt: skip
    return labels


def _hwc(data: np.ndarray) -> np.ndarray:
    """``[N, 3072]`` rows of R, G, B planes → ``uint8 [N, 32, 32, 3]`` (contiguous)."""
    return np.ascontiguousarray(data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))


def _python_split(files: Sequence[Path], corpus: str) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Images, (fine) labels and, for CIFAR-100, coarse labels of the python batches ``files``."""
    images, labels, coarse = [], [], []
    classes = CIFAR_LAYOUTS[(corpus, "python")].classes
    for path in files:
        entry = read_cifar_pickle(path)
        data = _field(entry, ("data",), path)
        if not (isinstance(data, np.ndarray) and data.dtype == np.uint8 and data.ndim == 2
                and data.shape[1] == PIXELS):  # fmt: skip
            got = f"{data.dtype} {list(data.shape)}" if isinstance(data, np.ndarray) else type(data).__name__
            raise ImageDataError(f"{path}: 'data' must be unsigned bytes [N, {PIXELS}] (3 planes of 32 × 32), "
                                 f"got {got}")  # fmt: skip
        keys = ("labels",) if corpus == "cifar10" else ("fine_labels",)
        labels.append(_labels(_field(entry, keys, path), len(data), classes, keys[0], path))
        if corpus == "cifar100":
            values = _field(entry, ("coarse_labels",), path)
            coarse.append(_labels(values, len(data), COARSE_CLASSES, "coarse_labels", path))
        images.append(data)
    stacked = np.concatenate(images) if len(images) > 1 else images[0]
    return _hwc(stacked), np.concatenate(labels), np.concatenate(coarse) if coarse else None


def _names(values: Any, count: int, what: str, path: Path) -> list[str]:
    if not isinstance(values, (list, tuple)) or not all(isinstance(v, (str, bytes)) for v in values):
        raise ImageDataError(f"{path}: {what} must be a list of names, got {type(values).__name__}")
    names = [v.decode("latin1") if isinstance(v, bytes) else v for v in values]
    if len(names) != count:
        raise ImageDataError(f"{path}: {len(names)} {what}, expected {count}")
    return names


def read_cifar_binary(path: str | os.PathLike, corpus: Corpus) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Images ``uint8 [N, 32, 32, 3]``, labels ``int64 [N]`` (CIFAR-100: fine) and CIFAR-100's coarse labels
    (None for CIFAR-10) of one binary file: ``N`` records of the label byte(s) and 3,072 pixel bytes.

    Raises:
        MissingImageDataError: no such file.
        ImageDataError: a size that is not a whole number of records, a label out of range.
    """
    path = Path(path)
    if not path.is_file():
        raise MissingImageDataError(f"CIFAR binary file not found: {path}")
    head = 1 if corpus == "cifar10" else 2
    record = head + PIXELS
    size = path.stat().st_size
    if size == 0 or size % record:
        raise ImageDataError(f"{path}: {size} bytes is not a whole number of {_NAMES[corpus]} records "
                             f"({record} bytes each: {head} label byte(s) and {PIXELS} pixel bytes); "
                             "the file is truncated or not a CIFAR binary file")  # fmt: skip
    try:
        rows = np.fromfile(path, dtype=np.uint8).reshape(-1, record)
    except (OSError, ValueError) as exc:
        raise ImageDataError(f"{path}: cannot be read ({str(exc)[:200]})") from None
    classes = CIFAR_LAYOUTS[(corpus, "binary")].classes
    labels = _labels(rows[:, head - 1], len(rows), classes, "labels" if head == 1 else "fine labels", path)
    coarse = _labels(rows[:, 0], len(rows), COARSE_CLASSES, "coarse labels", path) if head == 2 else None
    return _hwc(rows[:, head:]), labels, coarse


def _text_names(path: Path, count: int) -> list[str]:
    if not path.is_file():
        raise MissingImageDataError(f"CIFAR label names file not found: {path}")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ImageDataError(f"{path}: not a text file of class names ({exc.reason} at byte {exc.start})") from None
    names = [line.strip() for line in text.splitlines() if line.strip()]
    if len(names) != count:
        raise ImageDataError(f"{path}: {len(names)} class names (one a line), expected {count}")
    return names


# ----------------------------------------------------------------------------- finding the files
def _folder(root: Path, layout: CifarLayout, corpus: str) -> Path | None:
    """Where a version's files lie: ``root/<official folder>``, or ``root`` itself when it is that folder
    (holds one of its files); None when neither. The official folder must resolve inside ``root``'s real path
    (:func:`~modforge.core.safe_files.folder_below`): one planted as a link to someone's folder is refused."""
    names = (*layout.train, *layout.test, *layout.meta)
    for candidate in (folder_below(root, layout.folder, f"{corpus}: batches folder"), root):
        if candidate.is_dir() and any((candidate / name).is_file() for name in names):
            return candidate
    return None


def _expected(root: Path, corpus: str, version: str) -> str:
    layout = CIFAR_LAYOUTS[(corpus, version)]
    names = (*layout.train, *layout.test, *layout.meta)
    return f"{', '.join(names)} in {root / layout.folder} (the {version} version)"


def load_cifar(
    root: str | os.PathLike, corpus: Corpus, version: Literal["auto", "python", "binary"] = "auto"
) -> CifarSplits:
    """CIFAR-10 or CIFAR-100 from the official files under ``root`` (see the module's layouts; ``root`` may
    also be the corpus' folder itself). ``auto`` reads the python version when its folder is there, else
    the binary one.

    Raises:
        MissingImageDataError: the files are not there (the message lists them, their folder and the
            download command).
        ImageDataError: a damaged or hostile file, a shape or label out of range.
        UnsafePathError: the official folder below ``root`` leads out of it through a link.
    """
    if corpus not in _NAMES:
        raise ImageDataError(f"unknown corpus {corpus!r}: expected 'cifar10' or 'cifar100'")
    if version not in ("auto", "python", "binary"):
        raise ImageDataError(f"unknown CIFAR version {version!r}: expected 'auto', 'python' or 'binary'")
    root = Path(root)
    versions = ("python", "binary") if version == "auto" else (version,)
    found = next(((v, f) for v in versions if (f := _folder(root, CIFAR_LAYOUTS[(corpus, v)], corpus)) is not None),
                 None)  # fmt: skip
    if found is None:
        expected = " or ".join(_expected(root, corpus, v) for v in versions)
        raise MissingImageDataError(f"{_NAMES[corpus]} files not found: expected {expected}; "
                                    f"{download_hint(corpus, root)}")  # fmt: skip
    chosen, folder = found
    layout = CIFAR_LAYOUTS[(corpus, chosen)]
    missing = [name for name in (*layout.train, *layout.test, *layout.meta) if not (folder / name).is_file()]
    if missing:
        raise MissingImageDataError(f"{_NAMES[corpus]} files missing in {folder}: expected {', '.join(missing)} "
                                    f"there too ({chosen} version); {download_hint(corpus, root)}")  # fmt: skip
    coarse_names: list[str] | None = None
    if chosen == "python":
        train = _python_split([folder / n for n in layout.train], corpus)
        test = _python_split([folder / n for n in layout.test], corpus)
        meta_path = folder / layout.meta[0]
        meta = read_cifar_pickle(meta_path)
        key = "label_names" if corpus == "cifar10" else "fine_label_names"
        class_names = _names(_field(meta, (key,), meta_path), layout.classes, key, meta_path)
        if corpus == "cifar100":
            values = _field(meta, ("coarse_label_names",), meta_path)
            coarse_names = _names(values, COARSE_CLASSES, "coarse_label_names", meta_path)
    else:
        parts = [read_cifar_binary(folder / n, corpus) for n in layout.train]
        train = (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]),
                 np.concatenate([p[2] for p in parts]) if corpus == "cifar100" else None)  # type: ignore[misc]  # fmt: skip
        test = read_cifar_binary(folder / layout.test[0], corpus)
        class_names = _text_names(folder / layout.meta[0], layout.classes)
        if corpus == "cifar100":
            coarse_names = _text_names(folder / layout.meta[1], COARSE_CLASSES)
    return CifarSplits(train[0], train[1], test[0], test[1], class_names, folder,
                       coarse_train_labels=train[2], coarse_test_labels=test[2], coarse_names=coarse_names)  # fmt: skip
