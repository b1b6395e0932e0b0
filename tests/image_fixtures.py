"""Writers of tiny image corpora in their *official* on-disk formats, for tests.

Each writer takes a folder and a few sizes, writes real files exactly as the official archives hold them
(IDX files with their big-endian headers, CIFAR batches pickled as Python 2's cPickle wrote them, the
binary CIFAR records, the Tiny-ImageNet tree, a folder per class, a CSV manifest) and returns what it wrote,
so a test can compare a reader's arrays with the truth — and with torchvision's readers of the same files.
"""

from __future__ import annotations

import dataclasses
import gzip
import io
import os
import pickle
import shlex
import struct
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

__all__ = [
    "CIFAR10_NAMES",
    "MNIST_FILES",
    "WrittenCifar",
    "WrittenIdx",
    "WrittenTinyImageNet",
    "emnist_label_range",
    "hostile_pickle",
    "idx_bytes",
    "py2_pickle_dumps",
    "write_cifar_binary",
    "write_cifar_python",
    "write_emnist",
    "write_idx",
    "write_image_folder",
    "write_manifest_csv",
    "write_mnist_family",
    "write_picture",
    "write_tiny_imagenet",
]

MNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")

_IDX_CODES = {np.dtype("u1"): 0x08, np.dtype("i1"): 0x09, np.dtype("i2"): 0x0B, np.dtype("i4"): 0x0C,
              np.dtype("f4"): 0x0D, np.dtype("f8"): 0x0E}  # fmt: skip


# ----------------------------------------------------------------------------- IDX
def idx_bytes(array: np.ndarray) -> bytes:
    """``array`` in the IDX format: two zero bytes, the type code, the dimension count, each dimension as a
    big-endian uint32, then the values big-endian."""
    array = np.asarray(array)
    code = _IDX_CODES[array.dtype.newbyteorder("=")]
    header = bytes([0, 0, code, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.astype(array.dtype.newbyteorder(">"), copy=False).tobytes()


def write_idx(path: str | os.PathLike, array: np.ndarray, *, gz: bool = False) -> Path:
    """Write ``array`` as an IDX file at ``path`` (gzip-compressed when ``gz``; the name is used as given)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = idx_bytes(array)
    path.write_bytes(gzip.compress(data, mtime=0) if gz else data)
    return path


@dataclasses.dataclass
class WrittenIdx:
    """What an IDX corpus writer wrote: the arrays (``uint8 [N, 28, 28]``, ``int64 [N]``) and the files."""

    folder: Path
    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray
    files: list[Path]


def _idx_corpus(folder: Path, names: Sequence[str], n_train: int, n_test: int, labels: tuple[int, int], *,
                gz: bool, raw: bool, seed: int) -> WrittenIdx:  # fmt: skip
    rng = np.random.default_rng(seed)
    arrays = [rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8), rng.integers(*labels, n_train, dtype=np.uint8),
              rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8), rng.integers(*labels, n_test, dtype=np.uint8)]  # fmt: skip
    files = []
    for name, array in zip(names, arrays, strict=True):
        if raw:
            files.append(write_idx(folder / name, array))
        if gz:
            files.append(write_idx(folder / f"{name}.gz", array, gz=True))
    return WrittenIdx(folder, arrays[0], arrays[1].astype(np.int64), arrays[2], arrays[3].astype(np.int64), files)


def write_mnist_family(folder: str | os.PathLike, n_train: int = 24, n_test: int = 12, *, num_classes: int = 10,
                       gz: bool = False, raw: bool = True, seed: int = 0) -> WrittenIdx:  # fmt: skip
    """The four MNIST-family files (random pixels, labels ``0 … num_classes - 1``) in ``folder``: raw, ``.gz``
    or both. For torchvision's layout pass ``root / "MNIST" / "raw"`` (``FashionMNIST``, ``KMNIST``)."""
    return _idx_corpus(Path(folder), MNIST_FILES, n_train, n_test, (0, num_classes), gz=gz, raw=raw, seed=seed)


def emnist_label_range(split: str) -> tuple[int, int]:
    """The labels an EMNIST split's files hold, as ``(low, high)`` with ``high`` excluded (letters: 1 … 26)."""
    return {"byclass": (0, 62), "bymerge": (0, 47), "balanced": (0, 47), "letters": (1, 27), "digits": (0, 10),
            "mnist": (0, 10)}[split]  # fmt: skip


def write_emnist(folder: str | os.PathLike, split: str = "balanced", n_train: int = 24, n_test: int = 12, *,
                 gz: bool = False, raw: bool = True, seed: int = 0) -> WrittenIdx:  # fmt: skip
    """The four files of an EMNIST split (``emnist-<split>-{train,test}-{images-idx3,labels-idx1}-ubyte``)
    in ``folder``; ``root / "gzip"`` with ``gz=True, raw=False`` is the official zip's layout,
    ``root / "EMNIST" / "raw"`` torchvision's."""
    names = [
        f"emnist-{split}-{part}-{kind}-ubyte" for part in ("train", "test") for kind in ("images-idx3", "labels-idx1")
    ]
    return _idx_corpus(Path(folder), names, n_train, n_test, emnist_label_range(split), gz=gz, raw=raw, seed=seed)


# ----------------------------------------------------------------------------- CIFAR
class _Py2Pickler(pickle._Pickler):  # type: ignore[name-defined]
    """Pickles as Python 2's cPickle did (protocol 2): ``bytes`` become Python 2 strings (``BINSTRING``),
    numpy's functions are named ``numpy.core.multiarray`` — what the official CIFAR files hold."""

    dispatch = pickle._Pickler.dispatch.copy()  # type: ignore[attr-defined]

    def _save_py2_string(self, obj: bytes) -> None:
        if len(obj) < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([len(obj)]) + obj)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", len(obj)) + obj)
        self.memoize(obj)

    dispatch[bytes] = _save_py2_string

    def save_global(self, obj: Any, name: str | None = None) -> None:
        module = getattr(obj, "__module__", None) or pickle.whichmodule(obj, name)
        module = module.replace("numpy._core", "numpy.core")
        self.write(pickle.GLOBAL + f"{module}\n{name or obj.__qualname__}\n".encode())
        self.memoize(obj)


def py2_pickle_dumps(obj: Any) -> bytes:
    """``obj`` pickled as Python 2's ``cPickle.dump(obj, f, 2)`` wrote it (bytes as Python 2 strings)."""
    out = io.BytesIO()
    _Py2Pickler(out, protocol=2).dump(obj)
    return out.getvalue()


CIFAR10_NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


@dataclasses.dataclass
class WrittenCifar:
    """What a CIFAR writer wrote: images ``uint8 [N, 32, 32, 3]`` (HWC) and ``int64`` labels (CIFAR-100: fine,
    and coarse = fine // 5), the class names and the folder."""

    folder: Path
    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray
    class_names: list[str]
    coarse_train_labels: np.ndarray | None = None
    coarse_test_labels: np.ndarray | None = None
    coarse_names: list[str] | None = None


def _cifar_arrays(corpus: str, n_train: int, n_test: int, seed: int) -> WrittenCifar:
    rng = np.random.default_rng(seed)
    classes = 10 if corpus == "cifar10" else 100
    train_labels, test_labels = rng.integers(0, classes, n_train), rng.integers(0, classes, n_test)
    names = CIFAR10_NAMES if corpus == "cifar10" else [f"fine_{k:02d}" for k in range(100)]
    data = WrittenCifar(Path(), rng.integers(0, 256, (n_train, 32, 32, 3), dtype=np.uint8), train_labels.astype(np.int64),
                        rng.integers(0, 256, (n_test, 32, 32, 3), dtype=np.uint8), test_labels.astype(np.int64), names)  # fmt: skip
    if corpus == "cifar100":
        data.coarse_train_labels, data.coarse_test_labels = train_labels // 5, test_labels // 5
        data.coarse_names = [f"coarse_{k:02d}" for k in range(20)]
    return data


def _rows(images: np.ndarray) -> np.ndarray:
    """HWC images → rows of 3,072 bytes (R plane, G plane, B plane), as the files store them."""
    return np.ascontiguousarray(images.transpose(0, 3, 1, 2).reshape(len(images), -1))


def write_cifar_python(root: str | os.PathLike, corpus: str = "cifar10", n_train: int = 20, n_test: int = 10, *,
                       seed: int = 0) -> WrittenCifar:  # fmt: skip
    """The python version of CIFAR-10 (``root/cifar-10-batches-py``: five training batches, ``test_batch``,
    ``batches.meta``) or CIFAR-100 (``root/cifar-100-python``: ``train``, ``test``, ``meta``), pickled with
    the official keys as Python 2 strings."""
    data = _cifar_arrays(corpus, n_train, n_test, seed)
    if corpus == "cifar10":
        folder = Path(root) / "cifar-10-batches-py"
        folder.mkdir(parents=True, exist_ok=True)
        for k, part in enumerate(np.array_split(np.arange(n_train), 5), 1):
            batch = {b"batch_label": f"training batch {k} of 5".encode(), b"labels": data.train_labels[part].tolist(),
                     b"data": _rows(data.train_images[part]), b"filenames": [f"img_{i}.png".encode() for i in part]}  # fmt: skip
            (folder / f"data_batch_{k}").write_bytes(py2_pickle_dumps(batch))
        test = {b"batch_label": b"testing batch 1 of 1", b"labels": data.test_labels.tolist(),
                b"data": _rows(data.test_images), b"filenames": [f"test_{i}.png".encode() for i in range(n_test)]}  # fmt: skip
        (folder / "test_batch").write_bytes(py2_pickle_dumps(test))
        meta = {b"num_cases_per_batch": max(1, n_train // 5), b"label_names": [n.encode() for n in data.class_names],
                b"num_vis": 3072}  # fmt: skip
        (folder / "batches.meta").write_bytes(py2_pickle_dumps(meta))
    else:
        folder = Path(root) / "cifar-100-python"
        folder.mkdir(parents=True, exist_ok=True)
        assert data.coarse_train_labels is not None and data.coarse_test_labels is not None and data.coarse_names
        for name, images, fine, coarse, label in (
            ("train", data.train_images, data.train_labels, data.coarse_train_labels, b"training batch 1 of 1"),
            ("test", data.test_images, data.test_labels, data.coarse_test_labels, b"testing batch 1 of 1"),
        ):
            batch = {b"filenames": [f"{name}_{i}.png".encode() for i in range(len(images))], b"batch_label": label,
                     b"fine_labels": fine.tolist(), b"coarse_labels": coarse.tolist(), b"data": _rows(images)}  # fmt: skip
            (folder / name).write_bytes(py2_pickle_dumps(batch))
        meta = {b"fine_label_names": [n.encode() for n in data.class_names],
                b"coarse_label_names": [n.encode() for n in data.coarse_names]}  # fmt: skip
        (folder / "meta").write_bytes(py2_pickle_dumps(meta))
    data.folder = folder
    return data


def write_cifar_binary(root: str | os.PathLike, corpus: str = "cifar10", n_train: int = 20, n_test: int = 10, *,
                       seed: int = 0) -> WrittenCifar:  # fmt: skip
    """The binary version: ``root/cifar-10-batches-bin`` (``data_batch_{1..5}.bin``, ``test_batch.bin``,
    ``batches.meta.txt``) or ``root/cifar-100-binary`` (``train.bin``, ``test.bin``, ``fine_label_names.txt``,
    ``coarse_label_names.txt``). Same ``seed``, same arrays as :func:`write_cifar_python`."""
    data = _cifar_arrays(corpus, n_train, n_test, seed)

    def records(images: np.ndarray, labels: np.ndarray, coarse: np.ndarray | None) -> bytes:
        head = [labels[:, None]] if coarse is None else [coarse[:, None], labels[:, None]]
        return np.concatenate([*(h.astype(np.uint8) for h in head), _rows(images)], axis=1).tobytes()

    if corpus == "cifar10":
        folder = Path(root) / "cifar-10-batches-bin"
        folder.mkdir(parents=True, exist_ok=True)
        for k, part in enumerate(np.array_split(np.arange(n_train), 5), 1):
            (folder / f"data_batch_{k}.bin").write_bytes(
                records(data.train_images[part], data.train_labels[part], None)
            )
        (folder / "test_batch.bin").write_bytes(records(data.test_images, data.test_labels, None))
        (folder / "batches.meta.txt").write_text("\n".join(data.class_names) + "\n\n")
    else:
        folder = Path(root) / "cifar-100-binary"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "train.bin").write_bytes(records(data.train_images, data.train_labels, data.coarse_train_labels))
        (folder / "test.bin").write_bytes(records(data.test_images, data.test_labels, data.coarse_test_labels))
        (folder / "fine_label_names.txt").write_text("\n".join(data.class_names) + "\n")
        (folder / "coarse_label_names.txt").write_text("\n".join(data.coarse_names or []) + "\n")
    data.folder = folder
    return data


class _System:
    """Unpickles into ``os.system(command)``."""

    def __init__(self, command: str):
        self.command = command

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (self.command,))


class _OpenFile:
    """Unpickles into ``open(path, "w")`` (creating the file)."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (self.path, "w"))


def hostile_pickle(marker: str | os.PathLike, how: str = "system") -> bytes:
    """A CIFAR-looking batch whose unpickling creates the file ``marker``: through ``os.system("touch ...")``
    (``how="system"``) or ``open(marker, "w")`` (``how="open"``)."""
    evil: Any = _System(f"touch {shlex.quote(os.fspath(marker))}") if how == "system" else _OpenFile(os.fspath(marker))
    return pickle.dumps({b"data": evil, b"labels": [0]}, protocol=4)


# ----------------------------------------------------------------------------- pictures and folders
def write_picture(path: str | os.PathLike, size: tuple[int, int] = (6, 5), *, seed: int = 0, mode: str = "RGB") -> Path:
    """A small random picture (``size`` = width, height) at ``path``; the format follows the suffix."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    shape = (size[1], size[0], 3) if mode == "RGB" else (size[1], size[0])
    image = Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8), mode="RGB" if mode == "RGB" else "L")
    if mode not in ("RGB", "L"):
        image = image.convert(mode)
    image.save(path, format="JPEG" if path.suffix.lower() in (".jpeg", ".jpg") else None)
    return path


@dataclasses.dataclass
class WrittenTinyImageNet:
    """What :func:`write_tiny_imagenet` wrote: the ``tiny-imagenet-200`` folder, the ids, the first synonym of
    each, and the expected ``(file, label)`` lists (sorted as the reader sorts them)."""

    folder: Path
    wnids: list[str]
    class_names: list[str]
    train: list[tuple[Path, int]]
    val: list[tuple[Path, int]]


def write_tiny_imagenet(root: str | os.PathLike, n_classes: int = 3, per_class: int = 2, n_val: int = 4, *,
                        size: int = 8, seed: int = 0) -> WrittenTinyImageNet:  # fmt: skip
    """A small Tiny-ImageNet-200 tree in ``root/tiny-imagenet-200``: ``wnids.txt`` (ids in a deliberately
    unsorted order), ``words.txt`` (more ids than used, as the real one), ``train/<wnid>/images/*.JPEG`` and
    ``<wnid>_boxes.txt``, ``val/images/*.JPEG`` with ``val_annotations.txt``, and an unlabelled ``test/``."""
    folder = Path(root) / "tiny-imagenet-200"
    rng = np.random.default_rng(seed)
    wnids = [f"n{9_000_000 - 1_000 * k:08d}" for k in range(n_classes)]  # descending: label order ≠ sorted order
    names = [f"thing {k}" for k in range(n_classes)]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "wnids.txt").write_text("".join(f"{w}\n" for w in wnids))
    words = ["n00000001\tentity\n"] + [
        f"{w}\t{n}, alias {k}, other\n" for k, (w, n) in enumerate(zip(wnids, names, strict=True))
    ]
    (folder / "words.txt").write_text("".join(words))
    train = []
    for label, wnid in enumerate(wnids):
        boxes = []
        for i in range(per_class):
            file = write_picture(folder / "train" / wnid / "images" / f"{wnid}_{i}.JPEG", (size, size),
                                 seed=int(rng.integers(1 << 30)))  # fmt: skip
            train.append((file, label))
            boxes.append(f"{file.name}\t0\t0\t{size - 1}\t{size - 1}\n")
        (folder / "train" / wnid / f"{wnid}_boxes.txt").write_text("".join(boxes))
    val, lines = [], []
    for i in range(n_val):
        label = i % n_classes
        file = write_picture(folder / "val" / "images" / f"val_{i}.JPEG", (size, size), seed=int(rng.integers(1 << 30)))
        val.append((file, label))
        lines.append(f"{file.name}\t{wnids[label]}\t1\t2\t{size - 2}\t{size - 1}\n")
    (folder / "val" / "val_annotations.txt").write_text("".join(lines))
    write_picture(folder / "test" / "images" / "test_0.JPEG", (size, size))
    val.sort(key=lambda item: str(item[0]))
    return WrittenTinyImageNet(folder, wnids, names, train, val)


def write_image_folder(root: str | os.PathLike, counts: Mapping[str, int], *, size: tuple[int, int] = (6, 5),
                       suffix: str = ".png", seed: int = 0) -> list[Path]:  # fmt: skip
    """One sub-folder of ``root`` per class of ``counts`` holding that many small pictures
    (``img_<i><suffix>``); the files written."""
    files = []
    for k, (name, count) in enumerate(counts.items()):
        (Path(root) / name).mkdir(parents=True, exist_ok=True)
        for i in range(count):
            files.append(write_picture(Path(root) / name / f"img_{i}{suffix}", size, seed=seed + 100 * k + i))
    return files


def write_manifest_csv(path: str | os.PathLike, rows: Iterable[Sequence[Any]],
                       header: Sequence[str] = ("path", "label", "split")) -> Path:  # fmt: skip
    """A CSV manifest: the ``header`` line, then one line per row (cells written as given)."""
    import csv

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    return path
