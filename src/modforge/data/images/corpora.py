"""The standard image corpora and picture folders as registered datasets.

``mnist``, ``fashion_mnist``, ``kmnist``, ``emnist`` (idx files), ``cifar10``, ``cifar100``
(python or binary batches), ``tiny_imagenet`` (its 200-class folder layout), ``image_folder``
(one subfolder per class) and ``image_csv`` (a manifest of path,label[,split]). Each reads
the official files from ``root`` (``download: true`` fetches and verifies them first), keeps
the official test split as ``test``, carves ``val`` from the training pictures when the corpus
has none, and applies ``data.transforms``. The in-memory corpora normalise with their training
split's per-channel mean and standard deviation (MNIST: 0.1307/0.3081); folders of colour
pictures with ImageNet's (what pretrained backbones expect).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, Optional

import numpy as np
import torch

from ...core.constraints import PositiveInt, Probability
from ...core.downloads import download_refusal, downloads_allowed
from ...core.errors import UsageError
from ...core.registries import register_dataset
from ...core.text_safety import plain_text
from ..base import DataSplits
from .dataset import MAX_PICTURE_PIXELS, FilePictures, TensorPictures
from .splits import IMAGENET_MEAN, IMAGENET_STD, picture_splits

__all__ = ["cifar10", "cifar100", "emnist", "fashion_mnist", "image_csv", "image_folder", "kmnist", "mnist",
           "tiny_imagenet"]  # fmt: skip

log = logging.getLogger("modforge.data")

EmnistSplit = Literal["byclass", "bymerge", "balanced", "letters", "digits", "mnist"]


def _prepare(name: str, root: str, download: bool, variant: str | None = None) -> Path:
    """``root`` as a folder; the corpus fetched and verified into it first when ``download`` —
    unless downloads are off (a stored config being rebuilt: :mod:`modforge.core.downloads`),
    when the files are read as they are and one warning says how to fetch them."""
    base = Path(root)
    if download and not downloads_allowed():
        log.warning("%s: download: true is not followed — %s; reading %s as it is (or fetch the files with "
                    "'modforge data download %s --root %s')", name, download_refusal(), plain_text(root), name,
                    plain_text(root))  # fmt: skip
        download = False
    if download:
        from .catalog import download_corpus

        download_corpus(name, base, variant=variant)
    return base


def _channel_stats(pictures: torch.Tensor) -> tuple[list[float], list[float]]:
    """Per-channel mean and standard deviation of uint8 pictures ``[N, C, H, W]`` scaled to [0, 1],
    from exact integer sums taken a chunk at a time (no float copy of the corpus)."""
    channels = pictures.shape[1]
    total = torch.zeros(channels, dtype=torch.int64)
    squares = torch.zeros(channels, dtype=torch.int64)
    for start in range(0, len(pictures), 2048):
        chunk = pictures[start : start + 2048].to(torch.int64).transpose(0, 1).reshape(channels, -1)
        total += chunk.sum(1)
        squares += chunk.square().sum(1)
    count = pictures.numel() // channels
    mean = total.double() / count
    var = (squares.double() / count - mean.square()) * count / max(1, count - 1)
    return [round(float(v) / 255, 4) for v in mean], [round(float(v) / 255, 4) for v in var.clamp(min=0).sqrt()]


def _in_memory(
    train: tuple[np.ndarray, np.ndarray], test: tuple[np.ndarray, np.ndarray], class_names: list[str], *,
    seed: int, val_fraction: float, transforms: Any, described: str,
) -> DataSplits:  # fmt: skip
    """Splits of pictures held as tensors: HW or HWC uint8 arrays → ``[N, C, H, W]``."""

    def tensors(images: np.ndarray, labels: np.ndarray) -> tuple[TensorPictures, torch.Tensor]:
        pictures = torch.from_numpy(np.ascontiguousarray(images))
        pictures = pictures.unsqueeze(1) if pictures.ndim == 3 else pictures.permute(0, 3, 1, 2).contiguous()
        return TensorPictures(pictures), torch.as_tensor(np.asarray(labels), dtype=torch.long)

    train_part = tensors(*train)
    mean, std = _channel_stats(train_part[0].pictures)
    return picture_splits(train=train_part, test=tensors(*test), class_names=class_names, seed=seed,
                          val_fraction=val_fraction, transforms=transforms, mean=mean, std=std,
                          described=described)  # fmt: skip


def _idx_corpus(name: str, root: str, seed: int, val_fraction: float, download: bool, transforms: Any) -> DataSplits:
    from .formats.idx import MNIST_FAMILY_CLASSES, load_mnist_family

    files = load_mnist_family(_prepare(name, root, download), name)  # type: ignore[arg-type]
    return _in_memory((files.train_images, files.train_labels), (files.test_images, files.test_labels),
                      list(MNIST_FAMILY_CLASSES[name]), seed=seed, val_fraction=val_fraction, transforms=transforms,
                      described=f"{name} grey levels 0..255 (0: background)")  # fmt: skip


def _idx_dataset(name: str, summary: str, root_help: str) -> Callable[..., DataSplits]:
    """Register the dataset ``name``, one corpus of MNIST's family: the same four official idx files and
    sizes, read by :func:`_idx_corpus`, so the three differ only in their name, classes and description."""

    def dataset(root: str, seed: int = 0, val_fraction: Probability = 0.1, download: bool = False,
                transforms: Optional[dict] = None) -> DataSplits:  # fmt: skip
        return _idx_corpus(name, root, seed, val_fraction, download, transforms)

    dataset.__name__ = dataset.__qualname__ = name
    dataset.__doc__ = f"""{summary}

    Args:
        root: {root_help}
        seed: seeds the validation carve and the augmentation (wired from the config's seed).
        val_fraction: share of the training pictures held out for validation (0: train on all).
        download: fetch and verify the official files into ``root`` first.
        transforms: ``data.transforms`` (wired from the config).
    """
    return register_dataset(name)(dataset)


mnist = _idx_dataset(
    "mnist",
    "MNIST handwritten digits from the official idx files (60,000 train, 10,000 test, 28×28 grey).",
    "folder holding ``train-images-idx3-ubyte[.gz]`` and the three other official files "
    "(or torchvision's ``MNIST/raw`` below it).",
)
fashion_mnist = _idx_dataset(
    "fashion_mnist",
    "Fashion-MNIST (Zalando): 10 clothing classes, MNIST's files and sizes.",
    "folder holding the four official idx files (or ``FashionMNIST/raw`` below it).",
)
kmnist = _idx_dataset(
    "kmnist",
    "Kuzushiji-MNIST: 10 classes of cursive Japanese characters, MNIST's files and sizes.",
    "folder holding the four official idx files (or ``KMNIST/raw`` below it).",
)


@register_dataset("emnist")
def emnist(root: str, split: EmnistSplit = "balanced", seed: int = 0, val_fraction: Probability = 0.1,
           download: bool = False, upright: bool = False, transforms: Optional[dict] = None) -> DataSplits:  # fmt: skip
    """EMNIST (NIST Special Database 19 as 28×28 pictures): one of its six splits.

    Args:
        root: folder holding ``emnist-<split>-train-images-idx3-ubyte[.gz]`` … (or ``gzip/``
            below it, as the official ``gzip.zip`` extracts, or torchvision's ``EMNIST/raw``).
        split: byclass (62 classes), bymerge (47), balanced (47), letters (26), digits or mnist (10).
        seed: seeds the validation carve and the augmentation.
        val_fraction: share of the training pictures held out for validation.
        download: fetch and verify ``gzip.zip`` into ``root`` first.
        upright: the files store every picture transposed; torchvision (and so most published
            numbers) leaves them so (False); True turns them upright.
        transforms: ``data.transforms`` (wired from the config).
    """
    from .formats.idx import EMNIST_CLASSES, load_emnist

    files = load_emnist(_prepare("emnist", root, download), split)
    train, test = files.train_images, files.test_images
    if upright:
        train, test = train.transpose(0, 2, 1), test.transpose(0, 2, 1)
    labels_train, labels_test = files.train_labels, files.test_labels
    names = list(EMNIST_CLASSES[split])
    return _in_memory((train, labels_train), (test, labels_test), names, seed=seed, val_fraction=val_fraction,
                      transforms=transforms, described="emnist grey levels 0..255 (0: background)")  # fmt: skip


def _cifar(name: Literal["cifar10", "cifar100"], root: str, version: str, seed: int, val_fraction: float,
           download: bool, transforms: Any, labels: str = "fine") -> DataSplits:  # fmt: skip
    from .formats.cifar import load_cifar

    variant = None if version == "auto" else version
    files = load_cifar(_prepare(name, root, download, variant), name, version)  # type: ignore[arg-type]
    train_labels, test_labels, names = files.train_labels, files.test_labels, list(files.class_names)
    if labels == "coarse":
        train_labels, test_labels, names = files.coarse_train_labels, files.coarse_test_labels, list(files.coarse_names)
    return _in_memory((files.train_images, train_labels), (files.test_images, test_labels), names, seed=seed,
                      val_fraction=val_fraction, transforms=transforms,
                      described=f"{name} RGB values 0..255")  # fmt: skip


@register_dataset("cifar10")
def cifar10(root: str, version: Literal["auto", "python", "binary"] = "auto", seed: int = 0,
            val_fraction: Probability = 0.1, download: bool = False, transforms: Optional[dict] = None) -> DataSplits:  # fmt: skip
    """CIFAR-10: 50,000 train and 10,000 test 32×32 colour pictures, 10 classes.

    Args:
        root: folder holding ``cifar-10-batches-py`` (python version) or ``cifar-10-batches-bin``.
        version: which version to read ('auto': python if present, else binary). The python
            batches are pickles: only arrays, lists, strings and numbers are admitted from them.
        seed: seeds the validation carve and the augmentation.
        val_fraction: share of the training pictures held out for validation.
        download: fetch and verify the archive into ``root`` and extract it first.
        transforms: ``data.transforms`` (wired from the config).
    """
    return _cifar("cifar10", root, version, seed, val_fraction, download, transforms)


@register_dataset("cifar100")
def cifar100(root: str, version: Literal["auto", "python", "binary"] = "auto", labels: Literal["fine", "coarse"] = "fine",
             seed: int = 0, val_fraction: Probability = 0.1, download: bool = False,
             transforms: Optional[dict] = None) -> DataSplits:  # fmt: skip
    """CIFAR-100: CIFAR-10's sizes with 100 fine classes (in 20 coarse superclasses).

    Args:
        root: folder holding ``cifar-100-python`` (python version) or ``cifar-100-binary``.
        version: which version to read ('auto': python if present, else binary).
        labels: 'fine' (100 classes) or 'coarse' (the 20 superclasses).
        seed: seeds the validation carve and the augmentation.
        val_fraction: share of the training pictures held out for validation.
        download: fetch and verify the archive into ``root`` and extract it first.
        transforms: ``data.transforms`` (wired from the config).
    """
    return _cifar("cifar100", root, version, seed, val_fraction, download, transforms, labels)


def _files(pairs: list[tuple[Path, int]], mode: Literal["RGB", "L"],
           max_pixels: int = MAX_PICTURE_PIXELS) -> tuple[FilePictures, torch.Tensor]:  # fmt: skip
    return (FilePictures([p for p, _ in pairs], mode, max_pixels),
            torch.tensor([label for _, label in pairs], dtype=torch.long))  # fmt: skip


def _folder_stats(channels: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    return (IMAGENET_MEAN, IMAGENET_STD) if channels == 3 else ((0.5,), (0.5,))


@register_dataset("tiny_imagenet")
def tiny_imagenet(root: str, seed: int = 0, val_fraction: Probability = 0.0, download: bool = False,
                  transforms: Optional[dict] = None) -> DataSplits:  # fmt: skip
    """Tiny-ImageNet (CS231n): 200 classes, 100,000 train and 10,000 labelled val 64×64 JPEGs,
    decoded as they are read. Its labelled ``val`` folder is the test split (the 10,000 test
    pictures come without labels), as papers report it; ``val_fraction`` > 0 carves a
    validation split from train.

    Args:
        root: folder holding ``tiny-imagenet-200`` (or that folder itself: ``wnids.txt``,
            ``words.txt``, ``train/<wnid>/images``, ``val/val_annotations.txt``).
        seed: seeds the validation carve and the augmentation.
        val_fraction: share of the training pictures held out for validation.
        download: fetch and verify ``tiny-imagenet-200.zip`` into ``root`` and extract it first.
        transforms: ``data.transforms`` (wired from the config).
    """
    from .formats.tiny_imagenet import list_tiny_imagenet

    listing = list_tiny_imagenet(_prepare("tiny_imagenet", root, download))
    mean, std = _folder_stats(3)
    return picture_splits(train=_files(listing.train, "RGB"), test=_files(listing.val, "RGB"),
                          class_names=listing.class_names, seed=seed, val_fraction=val_fraction,
                          transforms=transforms, mean=mean, std=std,
                          described="tiny-imagenet RGB values 0..255")  # fmt: skip


def _mode(channels: int) -> Literal["RGB", "L"]:
    if channels not in (1, 3):
        raise UsageError(f"channels must be 1 (grey) or 3 (RGB), got {channels}")
    return "L" if channels == 1 else "RGB"


@register_dataset("image_folder")
def image_folder(root: str, test_root: Optional[str] = None, val_root: Optional[str] = None,
                 classes: Optional[list[str]] = None, channels: int = 3, seed: int = 0,
                 val_fraction: Probability = 0.1, test_fraction: Probability = 0.0,
                 transforms: Optional[dict] = None, max_pixels: PositiveInt = MAX_PICTURE_PIXELS) -> DataSplits:  # fmt: skip
    """Pictures in one subfolder per class (torchvision's ``ImageFolder`` layout), decoded as read.

    Args:
        root: the training folder: ``root/<class>/<picture>`` (any picture Pillow reads).
        test_root: a test folder of the same layout (None: carve ``test_fraction`` from root).
        val_root: a validation folder of the same layout (None: carve ``val_fraction``).
        classes: the class folders to use, in label order (None: every subfolder, sorted).
        channels: 3 (RGB) or 1 (grey); pictures are converted.
        seed: seeds the carves and the augmentation.
        val_fraction: share of the training pictures held out for validation (without val_root).
        test_fraction: share held out for testing (without test_root).
        transforms: ``data.transforms`` (wired from the config).
        max_pixels: the pixel budget: a picture whose header declares more pixels is refused before it is
            decoded (default 2**26, e.g. 8192 × 8192).
    """
    from .formats.listing import list_image_folder

    mode = _mode(channels)
    train, names = list_image_folder(Path(root), classes)
    test = val = None
    if test_root is not None:
        test = _files(list_image_folder(Path(test_root), names)[0], mode, max_pixels)
    if val_root is not None:
        val = _files(list_image_folder(Path(val_root), names)[0], mode, max_pixels)
    train_part = _files(train, mode, max_pixels)
    return _file_splits(train_part, val, test, names, channels, seed=seed, val_fraction=val_fraction,
                        test_fraction=test_fraction, transforms=transforms)


def _file_splits(
    train: tuple[FilePictures, torch.Tensor], val: tuple[FilePictures, torch.Tensor] | None,
    test: tuple[FilePictures, torch.Tensor] | None, names: list[str], channels: int, *, seed: int,
    val_fraction: float, test_fraction: float, transforms: Any,
) -> DataSplits:  # fmt: skip
    """Splits of pictures read from files (a folder or a manifest): a split not given is carved from
    ``train`` (test by ``test_fraction``, val by ``val_fraction``); ImageNet's statistics for colour."""
    if test is None and test_fraction > 0:
        train, test = _carve(train, test_fraction, seed)
    mean, std = _folder_stats(channels)
    return picture_splits(train=train, val=val, test=test, class_names=names, seed=seed,
                          val_fraction=val_fraction if val is None else 0.0, transforms=transforms, mean=mean,
                          std=std, described=f"picture values 0..255 ({_mode(channels)})")  # fmt: skip


def _carve(part: tuple[FilePictures, torch.Tensor], fraction: float, seed: int):
    from .splits import stratified_positions

    kept, held = stratified_positions(part[1], fraction, seed + 1)  # not the same draw as the val carve
    return (part[0].take(kept), part[1][kept]), (part[0].take(held), part[1][held])


@register_dataset("image_csv")
def image_csv(manifest: str, root: Optional[str] = None, channels: int = 3, seed: int = 0,
              val_fraction: Probability = 0.1, test_fraction: Probability = 0.0,
              transforms: Optional[dict] = None, max_pixels: PositiveInt = MAX_PICTURE_PIXELS) -> DataSplits:  # fmt: skip
    """Pictures listed in a manifest: a CSV (or parquet) file with columns ``path,label[,split]``.

    Args:
        manifest: the manifest file. ``split`` (train/val/test), when present, assigns rows;
            missing splits are carved from train as with ``image_folder``.
        root: folder the paths are relative to (None: the manifest's folder); every path must
            stay inside it.
        channels: 3 (RGB) or 1 (grey).
        seed: seeds the carves and the augmentation.
        val_fraction: share of train held out for validation when no row says ``val``.
        test_fraction: share of train held out for testing when no row says ``test``.
        transforms: ``data.transforms`` (wired from the config).
        max_pixels: the pixel budget: a picture whose header declares more pixels is refused before it is
            decoded (default 2**26, e.g. 8192 × 8192).

    A path naming a FIFO, device, socket or folder is refused when the manifest is read, naming its line; the
    manifest itself is read only when it is a regular file of at most 1 GiB (one error naming it otherwise).
    """
    from .formats.listing import manifest_classes, read_image_manifest

    mode = _mode(channels)
    rows = read_image_manifest(Path(manifest), None if root is None else Path(root))
    names = manifest_classes([label for _, label, _ in rows])
    label_of = {name: i for i, name in enumerate(names)}
    by_split: dict[str, list[tuple[Path, int]]] = {"train": [], "val": [], "test": []}
    unknown = sorted({split for _, _, split in rows if split and split not in by_split})
    if unknown:
        raise UsageError(f"{manifest}: split column holds {', '.join(map(repr, unknown[:5]))}; expected train, val, "
                         "test or empty (train)")  # fmt: skip
    for path, label, split in rows:
        by_split[split or "train"].append((path, label_of[label]))
    train_part = _files(by_split["train"], mode, max_pixels)
    test = _files(by_split["test"], mode, max_pixels) if by_split["test"] else None
    val = _files(by_split["val"], mode, max_pixels) if by_split["val"] else None
    return _file_splits(train_part, val, test, names, channels, seed=seed, val_fraction=val_fraction,
                        test_fraction=test_fraction, transforms=transforms)
