"""Mammoth's benchmarks, exactly: ``seq_mnist``, ``seq_cifar10``, ``seq_cifar100``, ``seq_tinyimg``,
``perm_mnist``, ``rot_mnist``.

Each is a preset of the sequences of :mod:`modforge.continual.sequences` (those that
:mod:`modforge.continual.benchmarks`' ``seq``, ``perm`` and ``rot`` build) over modforge's reader of
the official files, with what Mammoth's dataset class (aimagelab/mammoth, ``datasets/seq_*.py``,
``perm_mnist.py``, ``rot_mnist.py`` and ``datasets/utils/continual_dataset.py``) fixes:

================  ======================  ==========================================================
benchmark         tasks                   inputs
================  ======================  ==========================================================
``seq_mnist``     5 × 2 classes           ``ToTensor`` only (values in [0, 1], no normalisation)
``seq_cifar10``   5 × 2 classes           train: 32-crop of the 4-padded picture, horizontal flip;
                                          normalised by (0.4914, 0.4822, 0.4465) / (0.2470, 0.2435, 0.2615)
``seq_cifar100``  10 × 10 classes         the same, normalised by (0.5071, 0.4867, 0.4408) / (0.2675, 0.2565, 0.2761)
``seq_tinyimg``   10 × 20 classes         train: 64-crop of the 4-padded picture, flip;
                                          normalised by (0.4802, 0.4480, 0.3975) / (0.2770, 0.2691, 0.2821)
``perm_mnist``    20 (all 10 classes)     the task's permutation of the 784 values, after ``ToTensor``
``rot_mnist``     20 (all 10 classes)     the picture rotated by the task's angle in [0, 180) (nearest
                                          neighbour, zeros outside), then ``ToTensor``
================  ======================  ==========================================================

As Mammoth: the classes in their natural order unless ``class_order`` says otherwise ('mammoth' is
its ``--permute_classes 1``), the training split whole (``validation``: its ``--validation``, a
per-class carve of the training pictures that replaces the test set), the official test split per
task, MNIST samples flattened for its MLP. The Perm-/Rot-MNIST permutations and angles are drawn
as Mammoth draws them (NumPy's legacy generator seeded with the run's seed, one draw per task).
How this was checked against Mammoth's own classes: ``docs/worlds/continual-benchmarks.md``.
"""

from __future__ import annotations

import math
from typing import Any, Literal, Optional

import torch

from ..core.constraints import PositiveInt
from ..core.registries import register_dataset
from ..data.base import DataSplits
from .sequences import (
    ClassOrder,
    ContinualSplits,
    class_incremental,
    class_order_for,
    domain_incremental,
    flattened,
    flattened_sequence,
    split_fields,
)
from .task_transforms import PictureRotation, PixelPermutation, task_angles, task_permutations

__all__ = ["MAMMOTH_BENCHMARKS", "mammoth_validation"]

MAMMOTH_BENCHMARKS: dict[str, dict[str, Any]] = {
    "seq_mnist": {"mammoth": "seq-mnist", "corpus": "mnist", "classes_per_task": 2, "tasks": 5, "mean": (0.0,),
                  "std": (1.0,), "crop": None},
    "seq_cifar10": {"mammoth": "seq-cifar10", "corpus": "cifar10", "classes_per_task": 2, "tasks": 5,
                    "mean": (0.4914, 0.4822, 0.4465), "std": (0.2470, 0.2435, 0.2615), "crop": 32},
    "seq_cifar100": {"mammoth": "seq-cifar100", "corpus": "cifar100", "classes_per_task": 10, "tasks": 10,
                     "mean": (0.5071, 0.4867, 0.4408), "std": (0.2675, 0.2565, 0.2761), "crop": 32},
    "seq_tinyimg": {"mammoth": "seq-tinyimg", "corpus": "tiny_imagenet", "classes_per_task": 20, "tasks": 10,
                    "mean": (0.4802, 0.4480, 0.3975), "std": (0.2770, 0.2691, 0.2821), "crop": 64},
    "perm_mnist": {"mammoth": "perm-mnist", "corpus": "mnist", "tasks": 20, "mean": (0.0,), "std": (1.0,), "crop": None},
    "rot_mnist": {"mammoth": "rot-mnist", "corpus": "mnist", "tasks": 20, "mean": (0.0,), "std": (1.0,), "crop": None},
}  # fmt: skip
"""What each preset fixes, from Mammoth's dataset classes (``mean``/``std``: the normalisation after
scaling to [0, 1]; MNIST's (0,)/(1,) leave the values as ``ToTensor`` gives them)."""


def _transforms(name: str, augment: bool) -> dict[str, Any]:
    spec = MAMMOTH_BENCHMARKS[name]
    normalize = {"type": "normalize", "args": {"mean": list(spec["mean"]), "std": list(spec["std"])}}
    train: list[Any] = []
    if augment and spec["crop"]:
        train = [{"type": "random_crop", "args": {"size": spec["crop"], "padding": 4}}, "random_horizontal_flip"]
    return {"train": [*train, normalize], "eval": [normalize]}


def _corpus(name: str, root: str, seed: int, download: bool, augment: bool = True, version: str = "auto") -> DataSplits:
    from ..data.images import corpora

    corpus = MAMMOTH_BENCHMARKS[name]["corpus"]
    args: dict[str, Any] = {"root": root, "seed": seed, "val_fraction": 0.0, "download": download,
                            "transforms": _transforms(name, augment)}  # fmt: skip
    if corpus in ("cifar10", "cifar100"):
        args["version"] = version
    return getattr(corpora, corpus)(**args)


def mammoth_validation(labels: torch.Tensor, validation: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Mammoth's ``--validation`` carve (``datasets/utils/validation.py``, ``get_validation_indexes``):
    ``validation`` percent of each class (a value below 1 is a fraction), rounded up, held out; for each
    class in label order, its positions in a ``torch.randperm`` seeded with ``seed`` — the first ones
    held out. Returns (kept, held-out) positions, class by class in that order (not sorted)."""
    import numpy as np

    if validation < 1:
        validation = round(validation * 100, 2)
    if not 0 < validation < 100:
        raise ValueError(f"validation must be a percentage in (0, 100) (or a fraction below 1), got {validation}")
    targets = labels.numpy()
    classes, counts = np.unique(targets, return_counts=True)
    held_counts = np.ceil(counts * (validation / 100)).astype(int)
    positions = np.arange(len(targets))
    kept, held = [], []
    for cls, count, n_held in zip(classes, counts, held_counts, strict=True):
        of_class = positions[targets == cls]
        order = torch.randperm(int(count), generator=torch.Generator().manual_seed(seed)).numpy()
        held.append(of_class[order[:n_held]])
        kept.append(of_class[order[n_held:]])
    return torch.as_tensor(np.concatenate(kept)), torch.as_tensor(np.concatenate(held))


def _carved(base: DataSplits, validation: Optional[float], seed: int, mapping: torch.Tensor | None = None) -> DataSplits:
    """``base`` with Mammoth's validation carve as ``val`` and no test split (Mammoth evaluates on the
    carve instead), or unchanged without ``validation``. ``mapping``: the class renumbering the carve
    follows (Mammoth carves after permuting the classes)."""
    if validation is None:
        return base
    labels = base.train.labels if mapping is None else mapping[base.train.labels]
    kept, held = mammoth_validation(labels, validation, seed)
    fields = split_fields(base)
    fields.update(train=base.train.subset(kept), val=base.train.subset(held, train=False), test=None)
    return DataSplits(**fields)


def _class_incremental(name: str, base: DataSplits, *, class_order: ClassOrder, validation: Optional[float], seed: int,
                       flatten: bool = False) -> ContinualSplits:  # fmt: skip
    spec = MAMMOTH_BENCHMARKS[name]
    order = class_order_for(base.num_classes, class_order, seed)
    mapping = torch.empty(len(order), dtype=torch.long)
    mapping[torch.tensor(order)] = torch.arange(len(order))
    base = _carved(base, validation, seed, mapping)
    splits = class_incremental(flattened(base) if flatten else base, classes_per_task=spec["classes_per_task"],
                               class_order=order, seed=seed)  # fmt: skip
    assert len(splits.tasks) == spec["tasks"]
    return splits


@register_dataset("seq_mnist")
def seq_mnist(root: str, seed: int = 0, class_order: ClassOrder = "natural", flatten: bool = True,
              validation: Optional[float] = None, download: bool = False) -> ContinualSplits:  # fmt: skip
    """Mammoth's Seq-MNIST: MNIST's official files as 5 tasks of 2 classes, values as ``ToTensor``
    gives them (no normalisation, no augmentation), flattened for Mammoth's MLP.

    Args:
        root: folder holding MNIST's four official idx files (as the ``mnist`` dataset takes it).
        seed: seeds the class order ('seeded', 'mammoth') and the validation carve (wired from the config's seed).
        class_order: 'natural' (Mammoth's default), 'mammoth' (its --permute_classes 1), 'seeded', or the 10 classes.
        flatten: samples as 784-value vectors (Mammoth's MNISTMLP flattens them); False: 1×28×28 images.
        validation: Mammoth's --validation: this percent of each class's training pictures held out as
            each task's validation set, which replaces the test set (None: train on all, test on the test split).
        download: fetch and verify the official files into ``root`` first.
    """
    base = _corpus("seq_mnist", root, seed, download)
    return _class_incremental("seq_mnist", base, class_order=class_order, validation=validation, seed=seed,
                              flatten=flatten)  # fmt: skip


seq_mnist.num_classes = 10  # stated without loading, so validation can check a configured num_classes


@register_dataset("seq_cifar10")
def seq_cifar10(root: str, seed: int = 0, class_order: ClassOrder = "natural", augment: bool = True,
                validation: Optional[float] = None, version: Literal["auto", "python", "binary"] = "auto",
                download: bool = False) -> ContinualSplits:  # fmt: skip
    """Mammoth's Seq-CIFAR-10: CIFAR-10 as 5 tasks of 2 classes, trained on 4-padded 32-crops with
    horizontal flips, normalised with Mammoth's constants.

    Args:
        root: folder holding ``cifar-10-batches-py`` (or ``cifar-10-batches-bin``).
        seed: seeds the class order, the validation carve and each sample's augmentation (wired from the config's seed).
        class_order: 'natural' (Mammoth's default), 'mammoth' (its --permute_classes 1), 'seeded', or the 10 classes.
        augment: the random crops and flips (False: training pictures are only normalised).
        validation: Mammoth's --validation percent, held out per class; replaces the test set (None: none).
        version: which CIFAR files to read ('auto': python if present, else binary).
        download: fetch and verify the archive into ``root`` first.
    """
    base = _corpus("seq_cifar10", root, seed, download, augment, version)
    return _class_incremental("seq_cifar10", base, class_order=class_order, validation=validation, seed=seed)


seq_cifar10.num_classes = 10


@register_dataset("seq_cifar100")
def seq_cifar100(root: str, seed: int = 0, class_order: ClassOrder = "natural", augment: bool = True,
                 validation: Optional[float] = None, version: Literal["auto", "python", "binary"] = "auto",
                 download: bool = False) -> ContinualSplits:  # fmt: skip
    """Mammoth's Seq-CIFAR-100: CIFAR-100's fine classes as 10 tasks of 10, trained on 4-padded 32-crops
    with horizontal flips, normalised with Mammoth's constants.

    Args:
        root: folder holding ``cifar-100-python`` (or ``cifar-100-binary``).
        seed: seeds the class order, the validation carve and each sample's augmentation (wired from the config's seed).
        class_order: 'natural' (Mammoth's default), 'mammoth' (its --permute_classes 1), 'seeded', or the 100 classes.
        augment: the random crops and flips (False: training pictures are only normalised).
        validation: Mammoth's --validation percent, held out per class; replaces the test set (None: none).
        version: which CIFAR files to read ('auto': python if present, else binary).
        download: fetch and verify the archive into ``root`` first.
    """
    base = _corpus("seq_cifar100", root, seed, download, augment, version)
    return _class_incremental("seq_cifar100", base, class_order=class_order, validation=validation, seed=seed)


seq_cifar100.num_classes = 100


@register_dataset("seq_tinyimg")
def seq_tinyimg(root: str, seed: int = 0, class_order: ClassOrder = "natural", augment: bool = True,
                validation: Optional[float] = None, download: bool = False) -> ContinualSplits:  # fmt: skip
    """Mammoth's Seq-TinyImageNet: Tiny-ImageNet-200 (the official folder; its labelled ``val`` is the
    test split) as 10 tasks of 20 classes in ``wnids.txt`` order, trained on 4-padded 64-crops with
    horizontal flips, normalised with Mammoth's constants.

    Args:
        root: folder holding ``tiny-imagenet-200`` (as the ``tiny_imagenet`` dataset takes it).
        seed: seeds the class order, the validation carve and each sample's augmentation (wired from the config's seed).
        class_order: 'natural' (Mammoth's default), 'mammoth' (its --permute_classes 1), 'seeded', or the 200 classes.
        augment: the random crops and flips (False: training pictures are only normalised).
        validation: Mammoth's --validation percent, held out per class; replaces the test set (None: none).
        download: fetch and verify ``tiny-imagenet-200.zip`` into ``root`` first.
    """
    base = _corpus("seq_tinyimg", root, seed, download, augment)
    return _class_incremental("seq_tinyimg", base, class_order=class_order, validation=validation, seed=seed)


seq_tinyimg.num_classes = 200


def _domain(name: str, base: DataSplits, transforms: list, validation: Optional[float], seed: int,
            flatten: bool) -> ContinualSplits:  # fmt: skip
    splits = domain_incremental(_carved(base, validation, seed), transforms)
    return flattened_sequence(splits) if flatten else splits


@register_dataset("perm_mnist")
def perm_mnist(root: str, seed: int = 0, tasks: PositiveInt = 20, flatten: bool = True,
               validation: Optional[float] = None, download: bool = False) -> ContinualSplits:  # fmt: skip
    """Mammoth's Perm-MNIST: 20 tasks of all 10 MNIST classes, each with its own fixed permutation of
    the 784 pixel values, drawn as Mammoth draws them.

    Args:
        root: folder holding MNIST's four official idx files.
        seed: seeds the permutations (NumPy's legacy generator, one permutation per task, as Mammoth) and
            the validation carve (wired from the config's seed; 0 … 2**32 − 1).
        tasks: number of tasks (Mammoth: 20; its 10tasks config: 10).
        flatten: samples as 784-value vectors (Mammoth's MNISTMLP flattens them); False: 1×28×28.
        validation: Mammoth's --validation percent, held out per class; replaces the test set (None: none).
        download: fetch and verify the official files into ``root`` first.
    """
    base = _corpus("perm_mnist", root, seed, download)
    orders = task_permutations(math.prod(base.input_shape), tasks, seed, "mammoth")
    return _domain("perm_mnist", base, [PixelPermutation(order) for order in orders], validation, seed, flatten)


perm_mnist.num_classes = 10


@register_dataset("rot_mnist")
def rot_mnist(root: str, seed: int = 0, tasks: PositiveInt = 20, flatten: bool = True,
              validation: Optional[float] = None, download: bool = False) -> ContinualSplits:  # fmt: skip
    """Mammoth's Rot-MNIST: 20 tasks of all 10 MNIST classes, each rotated by its own angle in
    [0, 180) degrees (nearest neighbour, zeros outside), drawn as Mammoth draws them.

    Args:
        root: folder holding MNIST's four official idx files.
        seed: seeds the angles (NumPy's legacy generator, one angle per task, as Mammoth) and the
            validation carve (wired from the config's seed; 0 … 2**32 − 1).
        tasks: number of tasks (Mammoth: 20).
        flatten: samples as 784-value vectors (Mammoth's MNISTMLP flattens them); False: 1×28×28.
        validation: Mammoth's --validation percent, held out per class; replaces the test set (None: none).
        download: fetch and verify the official files into ``root`` first.
    """
    base = _corpus("rot_mnist", root, seed, download)
    angles = task_angles(tasks, seed, 0.0, 180.0, "mammoth")
    return _domain("rot_mnist", base, [PictureRotation(a, "nearest") for a in angles], validation, seed, flatten)


rot_mnist.num_classes = 10
